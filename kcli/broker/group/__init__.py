"""The group coordinator: group state (group, consumer_group), __consumer_offsets storage and loading
(storage, loader), and along Kafka 4's lines the facade (coordinator), the classic and consumer
protocols' rules and timers (classic_coordinator, consumer_coordinator), classic members in consumer
groups and the conversions between the two (migration), and the offsets (offsets)."""
