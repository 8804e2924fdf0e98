"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-599): who they apply to, how rates are measured, and how
long a client that goes over its quota is held back.

The entities and keys are kcli.quota_config's; `stats` holds Kafka's sampled rate and token bucket;
`manager` picks each client's quota by Kafka's precedence and computes the
throttle time; `quota_factory` holds one broker's managers; `quotas` and `fetch_quota` are what the request handlers call, and the connection
waits the throttle out.
"""
