"""What calls cost in dollars: the price table, a user's own prices, and the arithmetic.

The table is data shipped with the package (`prices.yaml`: dollars per million input and output tokens,
the batch discount, the day the prices were read and where), and `--prices FILE` (YAML or JSON) overrides
or extends it entry by entry. A model without an entry is *unpriced*: its cost is None, never 0, so a
missing price can never pass for a free run. Reasoning tokens are inside `completion_tokens` (OpenAI's
usage contract; Anthropic's output tokens include thinking too), so they are paid at the output price and
never counted twice.

It sits in the core because the model-call layer tracks a run's spend while it calls (`Spend`) and the
scoring layer reports it; neither imports the other.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
from dataclasses import dataclass
from datetime import date, datetime, timezone
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from judgebench_flows.core.errors import EXIT_BUDGET, UserError
from judgebench_flows.core.safe_yaml import NotReadable, read_limited
from judgebench_flows.core.safe_yaml import load as load_yaml
from judgebench_flows.core.yaml_lines import with_line

BUNDLED = "bundled"
DEFAULT_BATCH_DISCOUNT = 0.5


class ModelPrice(BaseModel):
    """One model's price: dollars per million tokens, and the factor a batch call pays."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float = Field(ge=0, description="dollars per million prompt tokens")
    output_per_mtok: float = Field(ge=0, description="dollars per million completion tokens (reasoning included)")
    batch_discount: float = Field(
        default=DEFAULT_BATCH_DISCOUNT, gt=0, le=1, description="price factor of a batch call"
    )
    max_output_tokens: int | None = Field(default=None, ge=1, description="the model's own cap on one answer")
    read_on: date | None = None
    source: str | None = None
    shutdown_date: date | None = Field(default=None, description="the provider's announced shutdown (retirement) date")


class PricedAs(BaseModel):
    """The entry a run was priced with (results.json's `usage.prices`): which one, read when, batch or not."""

    model_config = ConfigDict(frozen=True)

    model: str
    input_per_mtok: float
    output_per_mtok: float
    batch: bool = False
    batch_discount: float = DEFAULT_BATCH_DISCOUNT
    max_output_tokens: int | None = None
    read_on: str | None = None
    source: str | None = None
    table: str = BUNDLED  # "bundled", or the --prices file that gave this entry

    @property
    def factor(self) -> float:
        return self.batch_discount if self.batch else 1.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return cost_usd(self, prompt_tokens, completion_tokens, self.batch)


def cost_usd(price: ModelPrice | PricedAs, prompt_tokens: int, completion_tokens: int, batch: bool) -> float:
    """Dollars for these tokens at this price; a batch call pays `batch_discount` of it."""
    dollars = (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1_000_000
    return round(dollars * (price.batch_discount if batch else 1.0), 10)


def split_cost(
    price: PricedAs, prompt_tokens: int, completion_tokens: int, sync_prompt: int = 0, sync_completion: int = 0
) -> float:
    """Dollars for a run's tokens, of which `sync_*` were sent synchronously by a batch run (deadline
    passed, batches expired): those pay the synchronous price, the rest the run's own."""
    batched = price.cost(prompt_tokens - sync_prompt, completion_tokens - sync_completion)
    return round(batched + cost_usd(price, sync_prompt, sync_completion, False), 10)


def batch_of(config: Any) -> bool:
    """Whether the run sends its calls through the provider's batch API (priced at the batch discount)."""
    return bool(config.endpoint.batch)


def _groups(document: Any, where: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(shared fields, models) of each group: the document's own `models`, and every provider group
    (`openai: {read_on, source, models}`) as the bundled table has them."""
    if not isinstance(document, dict):
        raise UserError(f"{where}: expected a mapping with `models:` (model id -> input_per_mtok, output_per_mtok)")
    defaults = document.get("defaults") or {}
    groups = []
    for name, value in document.items():
        if name in ("defaults", "read_on", "source", "batch_discount"):
            continue
        group = document if name == "models" else value
        if not isinstance(group, dict) or not isinstance(group.get("models"), dict):
            what = "`models:` must map model ids to prices" if name == "models" else f"'{name}' has no `models:`"
            raise UserError(f"{where}: {what} (model id -> input_per_mtok, output_per_mtok)")
        shared = {**defaults, **{k: group[k] for k in ("read_on", "source", "batch_discount") if k in group}}
        groups.append((shared, group["models"]))
    if not groups:
        raise UserError(f"{where}: no `models:` in it")
    return groups


def parse_prices(document: Any, where: str) -> dict[str, ModelPrice]:
    """Model id -> price from a price document; a bad entry is one line naming it."""
    prices: dict[str, ModelPrice] = {}
    for shared, models in _groups(document, where):
        for model, fields in models.items():
            if not isinstance(fields, dict):
                raise UserError(f"{where}: models.{model}: expected input_per_mtok and output_per_mtok")
            try:
                prices[str(model)] = ModelPrice(**{**shared, **fields})
            except ValidationError as exc:
                error = exc.errors()[0]
                field = ".".join(str(p) for p in error["loc"])
                raise UserError(f"{where}: models.{model}.{field}: {error['msg']}") from None
    return prices


def load_price_file(path: str) -> dict[str, ModelPrice]:
    """A user's price file (YAML or JSON: JSON is YAML too)."""
    where = f"--prices {path}"
    try:
        text = read_limited(path)  # a regular file of bounded size
    except NotReadable as exc:
        raise UserError(f"{where}: cannot read it: {exc}") from None
    try:
        document = json.loads(text) if path.endswith(".json") else load_yaml(text, where)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested thousands deep
        reason = str(exc).strip().splitlines()[0]
        raise UserError(f"{where}: not valid JSON: {reason}") from None
    try:
        return parse_prices(document, where)
    except UserError as exc:  # `where: models.x.field: ...` -> `where, line N: models.x.field: ...`
        raise with_line(exc, where, text) from None


@functools.cache
def bundled_prices() -> dict[str, ModelPrice]:
    text = resources.files("judgebench_flows.core").joinpath("prices.yaml").read_text(encoding="utf-8")
    return parse_prices(load_yaml(text, "the bundled price table"), "the bundled price table")


def providers_own_endpoint(base_url: str | None) -> bool:
    """Whether `base_url` is a model provider's own API (the bundled prices apply), not another endpoint
    serving a model of that name: a local vLLM, the bundled stand-in or a gateway bills what it bills
    (often nothing), so a bundled price there would show a bill that never came. None: not known (yes)."""
    if base_url is None:
        return True
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return False
    from judgebench_flows.core.providers import PROVIDERS

    # a provider's host, a regional one of it (Vertex AI's `{location}-aiplatform.googleapis.com`), or a
    # pattern's (Bedrock Runtime's `bedrock-runtime.{region}.amazonaws.com`)
    return any(
        host == own or host.endswith(("." + own, "-" + own)) or ("*" in own and fnmatch.fnmatchcase(host, own))
        for provider in PROVIDERS.values()
        for own in provider.priced_hosts
    )


def price_for(
    model: str, prices_file: str | None = None, batch: bool = False, base_url: str | None = None
) -> PricedAs | None:
    """The price of `model` (the id sent to the endpoint, exactly): the user's file first, then the
    bundled table when `base_url` is the provider's own API; None otherwise (unpriced). Reads and checks
    the file each time it is asked."""
    user = load_price_file(prices_file) if prices_file else {}
    price: ModelPrice | None
    if model in user:
        price, table = user[model], prices_file
    else:
        price, table = (bundled_prices().get(model) if providers_own_endpoint(base_url) else None), BUNDLED
    if price is None:
        return None
    return PricedAs(
        model=model,
        input_per_mtok=price.input_per_mtok,
        output_per_mtok=price.output_per_mtok,
        batch=batch,
        batch_discount=price.batch_discount,
        max_output_tokens=price.max_output_tokens,
        read_on=price.read_on.isoformat() if price.read_on else None,
        source=price.source,
        table=str(table),
    )


RETIREMENT_WARNING_DAYS = 30


def shutdown_date_of(model: str, prices_file: str | None = None) -> date | None:
    """The provider's announced shutdown date of `model`: the --prices file's entry when it gives one (a
    date added or corrected there), else the bundled table's. A user's entry that changes only prices keeps
    the bundled date: a new price does not un-retire a model."""
    user = load_price_file(prices_file) if prices_file else {}
    given = user.get(model)
    if given is not None and given.shutdown_date is not None:
        return given.shutdown_date
    bundled = bundled_prices().get(model)
    return bundled.shutdown_date if bundled else None


class ModelRetirement(TypedDict):
    """A model's provider shutdown as the leaderboard marks it: the date, days left, whether it is past."""

    shutdown_date: str
    days_left: int
    retired: bool


def retirement_of(model: str, prices_file: str | None = None, today: date | None = None) -> ModelRetirement | None:
    """{"shutdown_date", "days_left", "retired"} when `model` is past its shutdown date or within 30 days
    of it (what the leaderboard marks and the commands warn about), else None."""
    shutdown = shutdown_date_of(model, prices_file)
    if shutdown is None:
        return None
    days = (shutdown - (today or datetime.now(timezone.utc).date())).days
    if days > RETIREMENT_WARNING_DAYS:
        return None
    return {"shutdown_date": shutdown.isoformat(), "days_left": days, "retired": days < 0}


def retirement_notice(model: str, prices_file: str | None = None, today: date | None = None) -> str | None:
    """One line when `model` is past its shutdown date or within 30 days of it, else None."""
    retirement = retirement_of(model, prices_file, today)
    if retirement is None:
        return None
    shutdown, days = retirement["shutdown_date"], retirement["days_left"]
    if retirement["retired"]:
        return f"{model} is past its provider's shutdown date {shutdown}: calls to it may fail (see its price entry)"
    when = "today" if days == 0 else f"in {days} day{'s' if days != 1 else ''}"
    return f"{model} shuts down {when} ({shutdown}, its provider's announced date): plan a replacement"


def format_usd(cost: float | None, unpriced: str = "unpriced") -> str:
    """Dollars for people: cents for sums over a cent, more digits below; None is "unpriced", never $0."""
    if cost is None:
        return unpriced
    if cost == 0:
        return "$0.00"
    return f"${cost:,.2f}" if cost >= 0.995 else f"${cost:.4f}" if cost >= 0.0001 else f"${cost:.6f}"


def run_cost_text(cost: float | None, priced_as: str | None) -> str:
    """A stored run's cost for tables: dollars, "unpriced", or blank for a run from before costs were kept."""
    if cost is None and priced_as != "unpriced":
        return ""
    return format_usd(cost)


class BudgetReached(UserError):
    """The run spent its --max-cost: it stopped, keeping what it judged (answers cached; the same
    command with a larger budget resumes without paying for them again). Exit code 6."""

    exit_code = EXIT_BUDGET
    prefix = "stopped"

    def __init__(self, message: str, spent: float | None = None):
        super().__init__(message)
        self.spent = spent

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (BudgetReached, (str(self), self.spent))


@dataclass
class NightSpend:
    """The dollars of a night's cells running side by side in one process, against the night's budget:
    each cell's `Spend` adds what it charges here and refuses a new call once the night's is spent (the
    night's run context holds it: `judging.run_context.NightShare.spend`)."""

    max_cost: float
    spent: float = 0.0


@dataclass
class Spend:
    """Dollars a run's calls have cost so far, from the usage each answer reports, against its budget.

    The caller charges every answered call it sent (a cache hit sends nothing and costs nothing) and asks
    before each new call whether the budget is spent: calls already in flight still finish, so a run
    may pass its budget by at most the calls in flight (--concurrency of them)."""

    price: PricedAs
    max_cost: float | None = None
    spent: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Tokens of a batch run's synchronous answers (past its deadline): paid without the batch discount.
    synchronous_tokens: tuple[int, int] = (0, 0)
    # The night this run is a cell of (its spending is counted there too), or None.
    night: NightSpend | None = None

    def charge(self, prompt_tokens: int, completion_tokens: int, synchronous: bool = False) -> None:
        before = self.spent
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if synchronous:
            sync_prompt, sync_completion = self.synchronous_tokens
            self.synchronous_tokens = (sync_prompt + prompt_tokens, sync_completion + completion_tokens)
        self.spent = split_cost(self.price, self.prompt_tokens, self.completion_tokens, *self.synchronous_tokens)
        if self.night is not None:
            self.night.spent += self.spent - before

    def check(self) -> None:
        if self.night is not None and self.night.spent >= self.night.max_cost:
            raise BudgetReached(
                f"the night's budget is reached: {format_usd(self.night.spent)} spent of max_cost "
                f"{format_usd(self.night.max_cost)} by its cells together; answers so far are cached",
                self.spent,
            )
        if self.max_cost is not None and self.spent >= self.max_cost:
            raise BudgetReached(
                f"budget reached: {format_usd(self.spent)} spent of --max-cost {format_usd(self.max_cost)}; "
                "answers so far are cached: run again with a larger --max-cost to resume",
                self.spent,
            )


def estimate_tokens(text: str) -> int:
    """Prompt tokens of `text` without the provider's tokenizer (none works offline: tiktoken downloads
    its encodings at run time): UTF-8 bytes / 3, rounded up. GPT and Claude tokenizers average about 4
    bytes per token on English prose and code, so this over-counts them by about a third; digit runs
    and CJK text come closer to 3 bytes per token."""
    return math.ceil(len(text.encode("utf-8")) / 3)


MESSAGE_OVERHEAD_TOKENS = 8
"""Per message: role and framing tokens the chat format adds (OpenAI's is 3-4)."""
