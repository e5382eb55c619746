// RunPod bills a pod's container disk beside its `cost`: $0.10 per GB-month, a month being 730
// hours. The adapter adds it to every price it reports (an offer's dph_total, a pod's rate), so
// that RunPod's figures are what a machine bills with its disk, as vast.ai's dph_total is.

/** $0.10 per GB-month, in micro-dollars. */
const DISK_MICROS_PER_GB_MONTH = 100_000;
const HOURS_PER_MONTH = 730;
const MICROS_PER_DOLLAR = 1_000_000;

/** What `diskGb` of container disk bills per hour, micro-dollars. */
export function diskMicrosPerHour(diskGb: number): number {
  return Math.round((diskGb * DISK_MICROS_PER_GB_MONTH) / HOURS_PER_MONTH);
}

/** A rate of RunPod's (GPUs, vCPUs and memory) with the container disk billed beside it, $/h to the micro-dollar. */
export function withDisk(dollarsPerHour: number, diskGb: number): number {
  return (Math.round(dollarsPerHour * MICROS_PER_DOLLAR) + diskMicrosPerHour(diskGb)) / MICROS_PER_DOLLAR;
}

/** The disk's part of a rate, $/h. */
export function diskPerHour(diskGb: number): number {
  return diskMicrosPerHour(diskGb) / MICROS_PER_DOLLAR;
}
