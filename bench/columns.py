"""The columns of a results table (CSV export, the report's table, pandas): one row per case.

Case fields first, then figures, then telemetry; ``None`` is "not measured", never 0.
"""

from __future__ import annotations

CASE_COLUMNS = [
    "run_id",
    "case_id",
    "workload",
    "mode",
    "device_kind",
    "device_count",
    "virtual",
    "precision",
    "math_mode",
    "xla",
    "per_replica_batch",
    "global_batch",
    "status",
    "reason",
    "nodes",  # after the contract's first 14 columns: 1, or the number of nodes of a cluster run
    "backend",  # tensorflow | jax (older results: tensorflow)
    "parallelism",  # data | model (older results: data)
    "slo_ms",  # serve cases: the p99 latency bound (empty on other modes)
    "tenants",  # copies of the case run at once on its one device (1: the case alone)
    "neighbour",  # a mix case: the noisy neighbour beside it, e.g. train-b64 (empty otherwise)
    "knobs",  # a sweep's point away from the profile's size, e.g. width=2048;depth=2 (empty at the profile's size)
    # the size knobs' values (workloads' ``knobs``; empty where the workload has no such knob)
    "size_width",
    "size_depth",
    "size_image",
    "size_seq",
    "size_dmodel",
    "size_layers",
]
# what a column means in results written before it existed
COLUMN_DEFAULTS = {"nodes": 1, "backend": "tensorflow", "parallelism": "data", "tenants": 1}
# columns that hold True/False on every row (never empty), so pandas reads them as bool
BOOL_COLUMNS = ("virtual", "xla", "unstable", "busy", "target_missed")
# columns with one value per device: in the CSV, the values joined by ";" (empty where not measured)
LIST_COLUMNS = (
    "device_peak_mem_per_device_bytes",
    "tenant_samples_per_s",
    "tenant_slowdown",
    "tenant_device_peak_mem_bytes",
    "tenant_gpu_mem_bytes",
)
FIGURE_COLUMNS = [
    "params",
    "flops_per_sample",
    "samples_per_s",
    "samples_per_s_ci_low",
    "samples_per_s_ci_high",
    "run_ci_low",  # where a rerun in a fresh worker may land (bench.spread): the run-level interval
    "run_ci_high",
    "step_time_median_s",
    "step_time_p90_s",
    "step_time_cv",
    "rounds",
    "steps_per_round",
    "compile_s",
    "achieved_tflops",
    "peak_tflops_measured",
    "device_peak_mem_bytes",
    "host_peak_rss_bytes",
    # beyond the contract
    "model_flops_per_sample",  # the 3 x forward convention (flops_per_sample is as executed)
    "hlo_dot_flops_per_step",  # dots and convolutions of the JAX step's HLO (bench.hlo_flops)
    "probe_n",  # the matmul probe's size, which its peak depends on
    "step_time_min_s",
    "step_time_p50_s",
    "step_time_p99_s",
    "unstable",
    "mfu_measured",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
    "latency_samples",  # a percentile these cannot resolve is empty (stats.samples_to_resolve: p99 needs 100)
    "loss_final",
    "intra_op_threads",
    "inter_op_threads",
    "all_reduce",
    "device_peak_mem_per_device_bytes",
    "xla_scope",
    "device_peak_mem_compile_bytes",
    "device_peak_mem_source",  # allocator, or "xla estimate" where a shared JAX worker cannot attribute its peak
    "xla_step_memory_estimate_bytes",  # temp + arguments + outputs - aliased of the compiled JAX step
    # the JAX backend: compile ahead of time, then a first (cold) step; what the model split covered
    "first_step_s",
    "warmup_steps",  # warm-up steps run: the profile's count, fewer where a slow step outlasted its time bound
    "model_parallel_split_fraction",
    "xla_flops_per_device_step",
    # the stopping rule (bench.stopping): the CI half-width aimed at and reached, and why the rounds ended
    "ci_method",
    "ci_target_rel",
    "ci_achieved_rel",
    "stop_reason",
    "ci_foreseen_cap_rel",  # a futile stop: the half-width the cap's rounds were foreseen to give
    "target_missed",
    # the persistent compile cache: off, miss, hit (or partial); a hit's compile_s is the load, cold_compile_s the first compile's
    "compile_cache",
    "cold_compile_s",
    "probe_case",  # the case whose worker measured the matmul peak (probed once per run, device and precision)
    # the copy probe (y = x + 1 over copy_probe_bytes, read + write counted): the roofline's bandwidth roof
    "mem_bw_gbps_per_device",
    "copy_probe_bytes",
    "copy_probe_case",
    "case_wall_s",  # the case's whole time in its worker: build, compile, rounds, latency or rate search
    # serve: the highest request rate whose p99 is certified under the SLO, and how it was found
    "max_rate_at_slo",
    "rate_bracket_low",
    "rate_bracket_high",
    "capacity_rate",
    "capacity_batch",  # the batch whose size / service time is the capacity (only batches that fit the SLO)
    "rate_at_slo_over_capacity",
    "serve_bound",  # what bounded the rate: the SLO (a trial under capacity failed) or the capacity
    "serve_p50_ms",
    "serve_p90_ms",
    "serve_p99_ms",
    "serve_achieved_rate",
    "mean_batch",
    "padding_frac",
    "max_delay_ms",
    "harness_floor_p99_ms",
    "energy_per_request_j",
    "serve_reason",
    "serve_note",
    # tenants (bench.tenants): N copies at once on one device against one alone with the same memory cap
    "sharing_mode",
    "stp",
    "worst_slowdown",
    "fairness",
    "antt",
    "jain",
    "alone_samples_per_s",
    "tenant_samples_per_s",
    "tenant_slowdown",
    "shared_window_s",
    "tenant_memory_cap_bytes",
    "tenant_device_peak_mem_bytes",
    "tenant_gpu_mem_bytes",
    "tenant_gpu_mem_sum_bytes",
    "sharing_verdict",
    # the mix: a batch-1 inference tenant's latency alone and beside its neighbour
    "alone_latency_p50_s",
    "alone_latency_p99_s",
    "latency_p99_inflation",
    "neighbour_samples_per_s",
]
TELEMETRY_COLUMNS = [
    "energy_j",
    "energy_j_per_sample",
    "samples_per_joule",
    "energy_above_idle_j",
    "power_mean_w",
    "power_max_w",
    "idle_power_w",
    "gpu_util_mean_pct",
    "sm_clock_mhz_median",
    "temp_max_c",
    "throttle_reasons",
    "gpu_telemetry",
    "nvml_memory_used_bytes",
    "host_cpu_util_pct",
    "cpu_energy_j",
    "cpu_energy_reason",
    "process_cpu_util_pct",
    "energy_source",
    "energy_reason",  # why a GPU case has no energy (a window too short for the counter and no power samples)
    "power_limit_w",  # the GPUs' enforced power limits, summed
    "telemetry_window_s",
    "clock_events_info",
    # the busy-machine witness: other processes' share of all cores during the timed rounds,
    # other processes computing on the case's GPUs, and the flag derived from both
    "other_cpu_pct",
    "other_gpu_processes",
    "busy",
]
COLUMNS = CASE_COLUMNS + FIGURE_COLUMNS + TELEMETRY_COLUMNS
