"""The group coordinator: group state (group, consumer_group), __consumer_offsets storage and loading
(storage, loader), and along Kafka 4's lines the facade (coordinator), the classic and consumer
protocols' rules and timers (classic_coordinator, consumer_coordinator) and the offsets (offsets)."""
