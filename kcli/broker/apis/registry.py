"""The API registry: api key -> (min version, max version, async handler).

The registry is the single source of truth for what the broker advertises in ApiVersions: an
API is listed exactly when a handler is registered, with exactly the versions it handles. It is
generic in what a handler is given (the broker's RequestContext), so it sits below that context.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from kcli.protocol.messages import api_name, kio_versions

Context = typing.TypeVar("Context")
"""What the dispatch hands every handler with its request (kcli.broker.apis.context.RequestContext)."""

Handler = Callable[[Context, typing.Any], Awaitable[typing.Any]]
"""`async def handle(ctx, request) -> response entity | None` (None: no response, e.g. acks=0)."""


@dataclass(frozen=True, slots=True)
class ApiSpec(typing.Generic[Context]):
    api_key: int
    min_version: int
    max_version: int
    handler: Handler[Context]

    @property
    def name(self) -> str:
        return api_name(self.api_key)

    def handles(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry(typing.Generic[Context]):
    """Handlers by api key; refuses versions kio cannot encode, so we never advertise them."""

    def __init__(self, specs: typing.Iterable[ApiSpec[Context]] = ()) -> None:
        self._specs: dict[int, ApiSpec[Context]] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ApiSpec[Context]) -> None:
        if spec.api_key in self._specs:
            raise ValueError(f"API key {spec.api_key} is registered twice")
        low, high = kio_versions(spec.api_key) or (0, -1)
        if not (low <= spec.min_version <= spec.max_version <= high):
            raise ValueError(
                f"{spec.name} v{spec.min_version}-{spec.max_version} is outside kio's v{low}-{high}"
            )
        self._specs[spec.api_key] = spec

    def get(self, api_key: int) -> ApiSpec[Context] | None:
        return self._specs.get(api_key)

    def __iter__(self) -> Iterator[ApiSpec[Context]]:
        return iter(sorted(self._specs.values(), key=lambda s: s.api_key))

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._specs
