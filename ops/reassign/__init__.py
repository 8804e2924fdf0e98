"""`kcli reassign`: moving partition replicas between brokers over standard admin APIs.

assignment  the JSON files of kafka-reassign-partitions.sh (parse, validate, format)
placement   Kafka's AdminUtils replica placement, for Kafka's --generate
plan        size- and rack-aware plans that move the fewest bytes (decommission, expansion)
moves       sources and destinations of each move; the throttled-replica lists
batches     sending a plan in batches, capped per broker
state       the cluster now: brokers, replicas, sizes, ongoing reassignments; starting and cancelling
throttle    the replication throttle configs, set and cleared
progress    bytes copied and remaining, rate, ETA (pure)
report      Kafka's output lines
generate / execute / verify   the commands
"""
