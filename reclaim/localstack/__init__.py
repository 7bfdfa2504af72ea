"""The embedded Kafka broker and S3 endpoint for the demo and for trying reclaim (``pip install 'reclaim[local]'``)."""
