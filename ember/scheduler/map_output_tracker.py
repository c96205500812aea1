"""Which map outputs of each shuffle exist, and where (Spark's MapOutputTrackerMaster).

An output small enough to travel inside its MapStatus (`data`) lives here, not on its
executor, so losing the executor does not lose it.
"""
from __future__ import annotations

import dataclasses
import os
import threading

from ember.shuffle.base import MapStatus
from ember.shuffle.writer import OUTPUT_FILE


class MapOutputTracker:
    def __init__(self) -> None:
        self._outputs: dict[int, list[MapStatus | None]] = {}
        self._lock = threading.Lock()

    def register_shuffle(self, shuffle_id: int, num_maps: int) -> None:
        with self._lock:
            if shuffle_id not in self._outputs:
                self._outputs[shuffle_id] = [None] * num_maps

    def contains(self, shuffle_id: int) -> bool:
        return shuffle_id in self._outputs

    def register_map_output(self, shuffle_id: int, map_index: int, status: MapStatus) -> None:
        """An output of a shuffle removed meanwhile (cleanShuffleDependencies during its
        stage) is dropped: nothing can read it."""
        with self._lock:
            outs = self._outputs.get(shuffle_id)
            if outs is not None:
                outs[map_index] = status

    def unregister_map_output(self, shuffle_id: int, map_index: int) -> None:
        with self._lock:
            outs = self._outputs.get(shuffle_id)
            if outs is not None and 0 <= map_index < len(outs):
                outs[map_index] = None

    def unregister_shuffle(self, shuffle_id: int) -> None:
        with self._lock:
            self._outputs.pop(shuffle_id, None)

    def remove_outputs_on_executor(self, executor_id: str) -> int:
        removed = 0
        with self._lock:
            for outs in self._outputs.values():
                for i, st in enumerate(outs):
                    if st is not None and st.executor_id == executor_id and st.data is None:
                        outs[i] = None
                        removed += 1
        return removed

    def remove_outputs_served_with(self, executor_id: str) -> int:
        """Outputs served from wherever this executor's were (its worker's shuffle service,
        which also serves the outputs of that worker's earlier executors): they go together
        when that worker is lost. Several workers may share a host, so not by host."""
        with self._lock:
            where = {st.address for outs in self._outputs.values() for st in outs
                     if st is not None and st.executor_id == executor_id}
            removed = 0
            for outs in self._outputs.values():
                for i, st in enumerate(outs):
                    if st is not None and st.data is None and (
                            st.executor_id == executor_id
                            or (st.address and st.address in where)):
                        outs[i] = None
                        removed += 1
        return removed

    def move_output_file(self, file_name: str, executor_id: str, host: str, path: str,
                         address: str, endpoint: str) -> int:
        """A map output file (``shuffle_<s>_<pid>_<tag>.data``) migrated to another executor:
        every output in it now lives there at the same ranges (Spark's updateMapOutput).
        Returns how many outputs moved (0 if the shuffle or those outputs are gone)."""
        m = OUTPUT_FILE.fullmatch(file_name)
        if m is None:
            return 0
        moved = 0
        with self._lock:
            outs = self._outputs.get(int(m.group(1)), [])
            for i, st in enumerate(outs):
                if st is not None and st.path and os.path.basename(st.path) + ".data" == file_name:
                    outs[i] = dataclasses.replace(st, executor_id=executor_id, host=host,
                                                  path=path, address=address, endpoint=endpoint)
                    moved += 1
        return moved

    def output_files(self, shuffle_id: int) -> set[str]:
        """The distinct map output files of a shuffle (many outputs share one)."""
        with self._lock:
            return {st.path + ".data" for st in self._outputs.get(shuffle_id, [])
                    if st is not None and st.path}

    def num_available(self, shuffle_id: int) -> int:
        outs = self._outputs.get(shuffle_id)
        return 0 if outs is None else sum(1 for s in outs if s is not None)

    def missing(self, shuffle_id: int) -> list[int]:
        outs = self._outputs.get(shuffle_id, [])
        return [i for i, s in enumerate(outs) if s is None]

    def statuses(self, shuffle_id: int) -> list[MapStatus | None]:
        with self._lock:
            return list(self._outputs.get(shuffle_id, []))

    def executors_with_outputs(self) -> set[str]:
        """Executors holding map output files of a registered shuffle."""
        with self._lock:
            return {st.executor_id for outs in self._outputs.values() for st in outs
                    if st is not None and st.data is None}

    def shuffle_ids(self) -> list[int]:
        return list(self._outputs)
