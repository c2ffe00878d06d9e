"""What a run needs of the host's and the device's memory, checked before anything is
allocated: the per-client host arrays, the [C, ...] tables, a cohort's rows, a round's input
and the compiled round (ValueError naming the field that sets the size)."""
import resource

import jax

from fedinit_jax import costs
from fedinit_jax.checks import fail_config
from fedinit_jax.experiment import tasks

__all__ = ["check_client_arrays", "available_memory", "host_memory", "check_memory",
           "SAVE_COPIES", "check_checkpoint_memory", "check_cohort_memory",
           "check_round_input_size", "round_memory"]


def check_client_arrays(config) -> None:
    """The host keeps C client sizes (int32) and a Bernoulli round with the per_client draw
    makes C uniforms (float64): refused naming num_clients when they cannot fit the host's
    available memory (before anything is allocated)."""
    per_client = 4 + (8 if config["participation_mode"] == "bernoulli"
                      and config["participation_draw"] == "per_client" else 0)
    available = host_memory()
    if available is not None and config["num_clients"] * per_client > available:
        fail_config("num_clients", config["num_clients"],
                    f"needs {config['num_clients'] * per_client / 2**30:.1f} GiB of host memory "
                    f"for its per-client arrays ({per_client} bytes a client), more than the "
                    f"{available / 2**30:.1f} GiB available: at most "
                    f"{available // per_client:,} clients on this host")


def available_memory():
    """Bytes this process's first device can hold: its allocator's limit (GPU/TPU), or
    what the host leaves this process (CPU: host_memory); None when neither is known."""
    try:  # this process's own device (another process's cannot be asked)
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics raise various kinds
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return host_memory()


def host_memory():
    """Bytes this process may still allocate on the host (None when unknown): the least of
    the host's MemAvailable, what the address-space limit (RLIMIT_AS, `ulimit -v`) leaves
    beyond the process's virtual size, and what its cgroup's memory limit leaves (a batch
    job's allocation: cgroup v2 memory.max - memory.current, or v1's limit - usage)."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        limits.append(int(fields["MemAvailable"].split()[0]) * 1024)
    except (OSError, KeyError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(max(0, soft - _virtual_size()))
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes",
                                    "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(f"/sys/fs/cgroup/{limit_file}"), _read_int(
            f"/sys/fs/cgroup/{usage_file}")
        if limit is not None and usage is not None and limit < 2 ** 60:  # v1: "no limit"
            limits.append(max(0, limit - usage))
            break
    return min(limits) if limits else None


def _virtual_size() -> int:
    """This process's virtual memory size in bytes (what RLIMIT_AS bounds)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _read_int(path):
    """The integer a /sys file holds, or None (missing, unreadable or "max")."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def check_memory(run_plan, state: costs.StateCosts):
    """ValueError before any allocation when even the state alone cannot fit: every client's
    w_i and per-client extras (C x their bytes, from the state's shapes) plus four copies
    of the model."""
    clients, width = run_plan.sampling.num_clients, run_plan.data.model_width
    need = clients * state.per_client_bytes + 4 * 4 * state.d
    available = available_memory()
    if available is not None and need > available:
        field, value = ("model_width", width) if width != 1.0 else ("num_clients", clients)
        fail_config(field, value,
                    f"the federation needs at least {need / 2**30:.1f} GiB "
                    f"({clients} clients x {state.client_vectors} vectors x "
                    f"d={state.d:,} parameters, "
                    f"{state.per_client_bytes:,} bytes a client) but {available / 2**30:.1f} GiB "
                    "are available")


# host copies of the [C, ...] tables that orbax holds while a checkpoint saves them: a
# Shakespeare FedInit run's resident memory rose from 8.2 to 14.2 GB saving its 3.4 GB w_i
# table (1.8 copies), and a SCAFFOLD run (w_i and c_i, 6.8 GB) was killed for memory at 24 GB
SAVE_COPIES = 2


def check_checkpoint_memory(run_plan, state: costs.StateCosts, round_need: int) -> None:
    """The device store on a CPU backend, where the device's tables are host memory too:
    ValueError unless the compiled round (round_need bytes, the tables included) and the
    SAVE_COPIES copies of the tables a checkpoint holds fit the host's available memory
    (client_store=auto then keeps the clients in the host store, whose checkpoints stream;
    an explicit client_store=device is refused before training)."""
    if jax.default_backend() != "cpu":
        return
    tables = run_plan.sampling.num_clients * state.per_client_bytes
    need, available = round_need + SAVE_COPIES * tables, host_memory()
    if available is not None and need > available:
        raise ValueError(f"the compiled round with its [C, ...] tables ({round_need / 2**30:.1f} "
                         f"GiB) and the {SAVE_COPIES} copies of the tables a checkpoint holds "
                         f"while saving them ({SAVE_COPIES * tables / 2**30:.1f} GiB) need "
                         f"{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB are available")


def check_cohort_memory(run_plan, state: costs.StateCosts, device_error) -> None:
    """Before the clients go to host memory (client_store auto): the device must still hold
    the model's copies and one round's cohort rows; else the device's refusal stands."""
    need = run_plan.client_slots * state.per_client_bytes + 16 * 4 * state.d
    available = available_memory()
    if available is not None and need > available:
        raise device_error


def check_round_input_size(run_plan, task: tasks.Task) -> None:
    """ValueError naming the field before a round input that cannot fit the host is built:
    N clients x K steps x B examples x (example + label + batch index bytes)."""
    data, n = run_plan.data, run_plan.client_slots
    need = n * task.steps * data.batch_size * task.example_bytes
    available = host_memory()
    if available is not None and need > available // 2:
        field, value = (("local_steps", data.local_steps) if data.local_steps
                        else ("local_epochs", data.local_epochs))
        fail_config(field, value,
                    f"a round's input needs {need / 2**30:.3g} GiB ({n} "
                    f"clients x K={task.steps:,} steps x B={data.batch_size} examples x "
                    f"{task.example_bytes} bytes) but the host has {available / 2**30:.1f} GiB "
                    "available (half of it may be used)")


def round_memory(compiled) -> dict:
    """XLA's memory account of a compiled round on one device, in bytes: arguments, outputs,
    temporaries, aliased (donated) and the peak it needs (args + outputs + temps - aliased)."""
    m = compiled.memory_analysis()
    account = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
               "temporaries": m.temp_size_in_bytes, "aliased": m.alias_size_in_bytes}
    account["peak"] = (account["arguments"] + account["outputs"] + account["temporaries"]
                       - account["aliased"])
    return account
