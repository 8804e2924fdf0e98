"""The classic group coordinator: group state (group), __consumer_offsets storage and loading (storage,
loader), and the protocol rules and timers that drive them (coordinator)."""
