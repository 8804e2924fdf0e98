"""A partition reassignment's replica sets (Kafka's PartitionReassignmentReplicas and
PartitionReassignmentRevert, KIP-455).

A reassignment from the current replicas C to a target T is kept in the partition's registration as
three lists: `replicas` = T followed by the replicas being removed (C - T, ascending), `adding` =
T - C and `removing` = C - T (both ascending). It completes once every replica of T is in the ISR:
the removing replicas then leave both the replicas and the ISR. Cancelling it goes back to the
original replicas (the transitional list without the adding ones) and takes the adding replicas out
of the ISR; when that would leave the ISR empty, the first original replica becomes the ISR on its
own, which is an unclean election and allowed only where the topic allows one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import ApiException
from kcli.broker.metadata.image import PartitionRegistration


def is_reassignment_in_progress(partition: PartitionRegistration) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


@dataclass(frozen=True, slots=True)
class CompletedReassignment:
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True, slots=True)
class PartitionReassignmentReplicas:
    removing: list[int]
    adding: list[int]
    replicas: list[int]

    @classmethod
    def of(cls, current: Sequence[int], target: Sequence[int]) -> PartitionReassignmentReplicas:
        """The transitional lists that take `current` to `target`."""
        removing = sorted(set(current) - set(target))
        adding = sorted(set(target) - set(current))
        return cls(removing, adding, [*target, *removing])

    @property
    def in_progress(self) -> bool:
        return bool(self.removing or self.adding)

    def maybe_complete(self, target_isr: Sequence[int]) -> CompletedReassignment | None:
        """The replicas and ISR once the removing replicas go, if `target_isr` holds every replica that
        stays; None while some of them are still catching up (or nothing is being reassigned)."""
        if not self.in_progress:
            return None
        isr, replicas = list(target_isr), list(self.replicas)
        if self.removing:
            isr = [r for r in target_isr if r not in self.removing]
            if not isr:
                return None
            replicas = [r for r in self.replicas if r not in self.removing]
            if not replicas:
                return None
        if not set(replicas) <= set(isr):
            return None
        return CompletedReassignment(replicas, isr)

    def original_replicas(self) -> list[int]:
        """The replicas before the reassignment started, in their order."""
        return [r for r in self.replicas if r not in self.adding]


@dataclass(frozen=True, slots=True)
class PartitionReassignmentRevert:
    """Where cancelling the partition's reassignment takes it: the original replicas, the ISR without
    the adding replicas, and whether that needs an unclean election (no original replica in the ISR)."""

    replicas: list[int]
    isr: list[int]
    unclean: bool

    @classmethod
    def of(cls, partition: PartitionRegistration) -> PartitionReassignmentRevert:
        ongoing = PartitionReassignmentReplicas(
            list(partition.removing_replicas), list(partition.adding_replicas), list(partition.replicas)
        )
        replicas = ongoing.original_replicas()
        isr = [r for r in partition.isr if r not in ongoing.adding]
        if isr:
            return cls(replicas, isr, False)
        if not replicas:
            # Unreachable unless the partition started out with no replicas at all.
            raise ApiException(
                ErrorCode.invalid_replica_assignment,
                "Invalid replica assignment: addingReplicas contains all replicas.",
            )
        return cls(replicas, [replicas[0]], True)
