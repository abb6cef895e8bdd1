"""The only modules that touch aioboto3/botocore. No botocore type or exception leaves them."""
