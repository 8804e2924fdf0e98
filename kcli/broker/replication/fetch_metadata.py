"""A Fetch's session id and epoch (KIP-227, Kafka's FetchMetadata): what both sides of a session agree on.

(0, -1) is a fetch outside any session; epoch 0 is a full fetch that asks for a new session (closing the
one its id names); epoch -1 with an id closes that session; epochs 1, 2, ... continue a session, one
step per request.
"""

from __future__ import annotations

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_INT32 = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """FetchMetadata.nextEpoch: after FINAL_EPOCH comes FINAL_EPOCH; after the largest int32, 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_INT32 else epoch + 1
