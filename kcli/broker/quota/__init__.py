"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-599): who they apply to, how rates are measured, and how
long a client that goes over its quota is held back.

`entity` names the quota entities and keys the controller accepts; `stats` holds Kafka's sampled
rate and token bucket; `manager` picks each client's quota by Kafka's precedence and computes the
throttle time, which the request handlers put in their answers and the connection waits out.
"""
