"""The per-provider map between canonical tool-call ids and the provider's own.

Clients only ever see canonical ids (`tu_` + ULID). A call the provider made
keeps its provider id here, so the conversation can come back with canonical
ids and still carry the provider's own; a call made by another provider gets a
fresh id valid for this one. The map lives in SQLite under the state dir, so a
worker restart keeps it, and it is bounded: the least recently used entries go
first.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ..protocol.ids import tool_call_id


class ToolIdMap:
    def __init__(self, path: Path | None, capacity: int = 200_000) -> None:
        self.capacity = capacity
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(str(path) if path else ":memory:", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS ids (canonical TEXT PRIMARY KEY, provider_id TEXT NOT NULL, "
            "session TEXT, used REAL NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS by_provider ON ids (provider_id, session)")
        self._db.execute("CREATE INDEX IF NOT EXISTS by_use ON ids (used)")
        self._count = int(self._db.execute("SELECT count(*) FROM ids").fetchone()[0])

    def __len__(self) -> int:
        return self._count

    def canonical_for(self, provider_id: str, session: str | None) -> str:
        """The canonical id for a call this provider just made (stable within a session)."""
        if session is not None:
            row = self._db.execute(
                "SELECT canonical FROM ids WHERE provider_id = ? AND session = ?", (provider_id, session)
            ).fetchone()
            if row:
                self._touch(row[0])
                return str(row[0])
        canonical = tool_call_id()
        self._put(canonical, provider_id, session)
        return canonical

    def provider_id_for(
        self, canonical: str, session: str | None, make: Callable[[str], str], known: str | None = None
    ) -> str:
        """The id to send this provider for canonical id `canonical`.

        `known` is the provider id the message itself carries when it came from
        this same provider; otherwise the map answers, or `make` mints one."""
        if known:
            row = self._db.execute("SELECT provider_id FROM ids WHERE canonical = ?", (canonical,)).fetchone()
            if row is None:
                self._put(canonical, known, session)
            return known
        row = self._db.execute("SELECT provider_id FROM ids WHERE canonical = ?", (canonical,)).fetchone()
        if row:
            self._touch(canonical)
            return str(row[0])
        minted = make(canonical)
        self._put(canonical, minted, session)
        return minted

    def _touch(self, canonical: str) -> None:
        self._db.execute("UPDATE ids SET used = ? WHERE canonical = ?", (time.time(), canonical))

    def _put(self, canonical: str, provider_id: str, session: str | None) -> None:
        cur = self._db.execute(
            "INSERT OR IGNORE INTO ids (canonical, provider_id, session, used) VALUES (?, ?, ?, ?)",
            (canonical, provider_id, session, time.time()),
        )
        self._count += cur.rowcount if cur.rowcount > 0 else 0
        if self._count > self.capacity:
            self._evict()

    def _evict(self) -> None:
        # Drop a tenth at a time so eviction is rare, not on every insert.
        excess = self._count - self.capacity + max(self.capacity // 10, 1)
        self._db.execute(
            "DELETE FROM ids WHERE canonical IN (SELECT canonical FROM ids ORDER BY used LIMIT ?)", (excess,)
        )
        self._count = int(self._db.execute("SELECT count(*) FROM ids").fetchone()[0])

    def close(self) -> None:
        self._db.close()
