"""What a cell runs, as typed parts (ADR 0160): engine, workload, prompts, scheme, acceptance, cell.

Each part is a frozen dataclass. Parts that come from a config entry (a model, a workload, a corpus,
a scheme) keep that validated entry as their one field and read it through typed properties: the
entry is what the cell id hashes, as given (a key left out is not the same as a key set to null), so
it is never rebuilt from fields. Defaults that readers used to restate at each read are declared on
the property, once.

``CellSpec.as_dict()`` is the one place the dict form is made: the hash input (cells), the engine
worker's start message and the adapters' input. ``CellSpec.from_dict()`` reads it back (a spec given
by hand, a test's, or one passed through the worker protocol); ``CellSpec.of()`` takes either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specjoule import axes

# Readers restated this default; the config schema fills it for every planned cell.
DEFAULT_READY_TIMEOUT_S = 900.0


def _entry() -> Any:
    # The entry is the part's data; dicts are not hashable, so a part hashes by identity of type only.
    return field(hash=False)


@dataclass(frozen=True)
class ModelSpec:
    """A pair's target or draft model (config ``models.<pair>.target|draft``)."""

    entry: Mapping[str, Any] = _entry()

    @property
    def model(self) -> str:
        return str(self.entry["model"])

    @property
    def load_format(self) -> str:
        return str(self.entry.get("load_format", "auto"))

    @property
    def tensor_parallel_size(self) -> int:
        return int(self.entry.get("tensor_parallel_size", 1))

    @property
    def declared_tensor_parallel_size(self) -> int | None:
        """As the entry gives it (None when left out: a spec written by hand)."""
        tp = self.entry.get("tensor_parallel_size")
        return int(tp) if tp else None

    @property
    def dtype(self) -> str:
        return str(self.entry.get("dtype", "auto"))

    @property
    def tokenizer(self) -> str | None:
        return self.entry.get("tokenizer") or None

    @property
    def revision(self) -> str | None:
        return self.entry.get("revision")

    def with_model(self, model: str) -> ModelSpec:
        return ModelSpec({**self.entry, "model": model})


@dataclass(frozen=True)
class EngineSpec:
    """What shapes the engine start: the engine, the model pair, the graph mode, device, caching, options."""

    engine: str
    target: ModelSpec
    draft: ModelSpec | None
    max_model_len: int | None
    cuda_graphs: bool
    device: str
    prefix_caching: bool
    options: Mapping[str, Any] = _entry()

    @property
    def n_gpus(self) -> int:
        """GPUs the engine holds: its target's tensor-parallel size (a drafter runs on the same GPUs; ADR 0155)."""
        return self.target.tensor_parallel_size


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload (config ``workloads.<name>``): its kind, lengths, window and load."""

    entry: Mapping[str, Any] = _entry()

    @property
    def kind(self) -> str:
        return str(self.entry["kind"])

    @property
    def is_loop(self) -> bool:
        """Open or closed loop: served by an engine's HTTP server, not its offline batch call."""
        return self.kind in ("open_loop", "closed_loop")

    @property
    def prompt_len(self) -> int:
        return int(self.entry["prompt_len"])

    @property
    def output_len(self) -> int:
        return int(self.entry["output_len"])

    @property
    def warmup_s(self) -> float:
        return float(self.entry["warmup_s"])

    @property
    def min_window_s(self) -> float:
        return float(self.entry["min_window_s"])

    @property
    def max_repeats(self) -> int:
        return int(self.entry["max_repeats"])

    @property
    def window_s(self) -> float:
        return float(self.entry["window_s"])

    @property
    def cooldown_s(self) -> float:
        return float(self.entry["cooldown_s"])

    @property
    def rate(self) -> float | None:
        return float(self.entry["rate"]) if self.entry.get("rate") is not None else None

    @property
    def concurrency(self) -> int | None:
        return int(self.entry["concurrency"]) if self.entry.get("concurrency") is not None else None

    @property
    def schedule(self) -> str | None:
        """Open loop: None when the config leaves it out (the load generator's default applies, ADR 0110)."""
        return self.entry.get("schedule")

    @property
    def burstiness(self) -> float | None:
        return float(self.entry["burstiness"]) if self.entry.get("burstiness") is not None else None

    @property
    def energy_window_s(self) -> float:
        """The minimum energy window a cell of this workload holds (planning estimates)."""
        return self.min_window_s if self.kind == "closed_batch" else self.window_s

    def without_warmup(self) -> WorkloadSpec:
        return WorkloadSpec({**self.entry, "warmup_s": 0})


@dataclass(frozen=True)
class CorpusSpec:
    """Where a cell's prompts come from (config ``corpora.<name>``) and how many the pool holds."""

    name: str
    pool_size: int | None
    entry: Mapping[str, Any] = _entry()


@dataclass(frozen=True)
class SchemeSpec:
    """A speculative scheme (config ``schemes.<name>``, with its name and resolved drafter)."""

    entry: Mapping[str, Any] = _entry()

    @property
    def name(self) -> str | None:
        return self.entry.get("name")

    @property
    def method(self) -> str:
        return str(self.entry["method"])

    @property
    def is_baseline(self) -> bool:
        return self.method == "baseline"

    @property
    def k(self) -> int | None:
        return int(self.entry["k"]) if self.entry.get("k") is not None else None

    @property
    def draft_tokens(self) -> int:
        """k of a speculative scheme (the config refuses one without it at parse time)."""
        if self.k is None:
            raise ValueError(f"scheme {self.name!r} ({self.method}) has no k")
        return self.k

    @property
    def synthetic(self) -> bool:
        return bool(self.entry.get("synthetic"))

    @property
    def drafter(self) -> str | None:
        return self.entry.get("drafter") or None

    @property
    def options(self) -> Mapping[str, Any]:
        return self.entry.get("options") or {}

    def with_drafter(self, drafter: str) -> SchemeSpec:
        return SchemeSpec({**self.entry, "drafter": drafter})


@dataclass(frozen=True)
class AcceptanceSpec:
    """Synthetic acceptance rates per draft position; None for model acceptance and baselines."""

    rates: tuple[float, ...] | None = None

    def as_list(self) -> list[float] | None:
        return list(self.rates) if self.rates else None


@dataclass(frozen=True)
class ProtocolSpec:
    """The parts of the measurement protocol a cell's runner reads."""

    idle_s: float = 0.0
    engine_ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S


@dataclass(frozen=True)
class CampaignSpec:
    """What every cell of a campaign shares; its dict form is hashed once per campaign."""

    engine: EngineSpec
    workload: WorkloadSpec
    corpus: CorpusSpec
    batch_size: int
    seed: int
    protocol: ProtocolSpec
    meter: str
    engine_replicate: int = 0

    def as_dict(self) -> dict[str, Any]:
        e = self.engine
        out = {
            "engine": e.engine,
            "target": e.target.entry,
            "draft": e.draft.entry if e.draft else None,
            "max_model_len": e.max_model_len,
            "batch_size": self.batch_size,
            "corpus": self.corpus.name,
            "corpus_spec": self.corpus.entry,
            "pool_size": self.corpus.pool_size,
            "seed": self.seed,
            "cuda_graphs": e.cuda_graphs,
            "workload": self.workload.entry,
            "device": e.device,
            "prefix_caching": e.prefix_caching,
            "engine_options": e.options,
            "protocol": {
                "idle_s": self.protocol.idle_s,
                "engine_ready_timeout_s": self.protocol.engine_ready_timeout_s,
            },
            "meter": self.meter,
        }
        if self.engine_replicate:  # in the hashed spec only when it is not 0: older ids stay (ADR 0064)
            out["engine_replicate"] = self.engine_replicate
        return out


@dataclass(frozen=True)
class ArmSpec:
    """A cell's own part inside its campaign: role, scheme, acceptance, window."""

    role: str
    scheme: SchemeSpec
    acceptance: AcceptanceSpec
    window_index: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scheme": self.scheme.entry,
            "role": self.role,
            "acceptance_rates": self.acceptance.as_list(),
        }
        if self.window_index:  # as engine_replicate: the first window keeps its pre-window id
            out["window_index"] = self.window_index
        return out


@dataclass(frozen=True)
class CellSpec:
    """Everything a cell's runner and engine adapter read."""

    campaign: CampaignSpec
    arm: ArmSpec

    # -- typed accessors -----------------------------------------------------------------------------
    @property
    def engine(self) -> EngineSpec:
        return self.campaign.engine

    @property
    def workload(self) -> WorkloadSpec:
        return self.campaign.workload

    @property
    def corpus(self) -> CorpusSpec:
        return self.campaign.corpus

    @property
    def scheme(self) -> SchemeSpec:
        return self.arm.scheme

    @property
    def acceptance(self) -> AcceptanceSpec:
        return self.arm.acceptance

    @property
    def protocol(self) -> ProtocolSpec:
        return self.campaign.protocol

    @property
    def batch_size(self) -> int:
        return self.campaign.batch_size

    @property
    def seed(self) -> int:
        return self.campaign.seed

    @property
    def role(self) -> str:
        return self.arm.role

    @property
    def drafter_model(self) -> str | None:
        """The model that drafts: the scheme's own drafter (eagle3, mtp, dflash, dspark), else for draft_model the
        pair's draft; None for ngram and baselines."""
        if self.scheme.drafter:
            return self.scheme.drafter
        if self.scheme.method == "draft_model" and self.engine.draft is not None:
            return self.engine.draft.model
        return None

    # -- changed copies ------------------------------------------------------------------------------
    def replace(self, **campaign_changes: Any) -> CellSpec:
        """A copy with campaign parts changed (batch_size, workload, engine, ...)."""
        return dataclasses.replace(self, campaign=dataclasses.replace(self.campaign, **campaign_changes))

    def with_engine(self, **engine_changes: Any) -> CellSpec:
        return self.replace(engine=dataclasses.replace(self.engine, **engine_changes))

    def with_scheme(self, scheme: SchemeSpec) -> CellSpec:
        return dataclasses.replace(self, arm=dataclasses.replace(self.arm, scheme=scheme))

    # -- the dict form -------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """The one dict form: the cell id's hash input and the engine adapters' (and worker's) input."""
        return {**self.campaign.as_dict(), **self.arm.as_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CellSpec:
        protocol = d.get("protocol") or {}
        corpus_entry = d.get("corpus_spec") or {}
        engine = EngineSpec(
            engine=d["engine"],
            target=ModelSpec(d["target"]),
            draft=ModelSpec(d["draft"]) if d.get("draft") else None,
            max_model_len=d.get("max_model_len"),
            cuda_graphs=bool(d.get("cuda_graphs", False)),
            device=d.get("device", "cuda"),
            prefix_caching=bool(d.get("prefix_caching", False)),
            options=d.get("engine_options") or {},
        )
        campaign = CampaignSpec(
            engine=engine,
            workload=WorkloadSpec(d["workload"]),
            corpus=CorpusSpec(d.get("corpus", ""), d.get("pool_size"), corpus_entry),
            batch_size=d["batch_size"],
            seed=d["seed"],
            protocol=ProtocolSpec(
                protocol.get("idle_s", 0), protocol.get("engine_ready_timeout_s", DEFAULT_READY_TIMEOUT_S)
            ),
            meter=d.get("meter", "auto"),
            engine_replicate=d.get("engine_replicate", 0),
        )
        rates = d.get("acceptance_rates")
        arm = ArmSpec(
            role=d.get("role", axes.ROLE_POINT),
            scheme=SchemeSpec(d["scheme"]),
            acceptance=AcceptanceSpec(tuple(rates) if rates else None),
            window_index=d.get("window_index", 0),
        )
        return cls(campaign, arm)

    @classmethod
    def of(cls, spec: CellSpec | Mapping[str, Any]) -> CellSpec:
        return spec if isinstance(spec, CellSpec) else cls.from_dict(spec)
