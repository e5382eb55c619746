// Cost and uptime arithmetic of SPEC.md section 2. Pure functions over plain numbers and dates.

const MS_PER_HOUR = 3_600_000;

/** Milliseconds from created_at to destroyed_at, or to `now` while the instance lives; never negative. */
export function uptimeMs(createdAt: Date, destroyedAt: Date | null, now: Date): number {
  const end = destroyedAt ?? now;
  return Math.max(0, end.getTime() - createdAt.getTime());
}

/** `H:MM:SS` with unbounded hours: 26 hours, 3 minutes and 4 seconds is `26:03:04`. */
export function formatUptime(ms: number): string {
  const totalSeconds = Math.floor(Math.max(0, ms) / 1000);
  const hours = Math.floor(totalSeconds / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  return `${hours}:${String(minutes).padStart(2, "0")}:${String(seconds).padStart(2, "0")}`;
}

/** Money is reported to 4 decimals. */
export function roundMoney(value: number): number {
  return round(value, 4);
}

export function round(value: number, decimals: number): number {
  const factor = 10 ** decimals;
  return Math.round((value + Number.EPSILON) * factor) / factor;
}

export interface CostFigures {
  costPerHour: number;
  uptimeHours: number;
  totalCost: number;
  hourlyRate: number;
  uptimeDays: number;
  estimatedDailyCost: number;
  estimatedMonthlyCost: number;
}

/**
 * total_cost = cost_per_hour x uptime_hours; uptime_days = uptime_hours / 24 to one decimal;
 * estimated_daily_cost = hourly_rate x 24; estimated_monthly_cost = daily x 30. Money to 4
 * decimals; uptime_hours to 4 decimals as well, so that the reported relation still holds.
 */
export function costFigures(costPerHour: number, uptime: number): CostFigures {
  const uptimeHours = uptime / MS_PER_HOUR;
  const daily = costPerHour * 24;
  return {
    costPerHour: roundMoney(costPerHour),
    uptimeHours: round(uptimeHours, 4),
    totalCost: roundMoney(costPerHour * uptimeHours),
    hourlyRate: roundMoney(costPerHour),
    uptimeDays: round(uptimeHours / 24, 1),
    estimatedDailyCost: roundMoney(daily),
    estimatedMonthlyCost: roundMoney(daily * 30),
  };
}

/** The money an instance has cost so far, unrounded: what limits are compared with. */
export function accruedCost(costPerHour: number, uptime: number): number {
  return (costPerHour * uptime) / MS_PER_HOUR;
}

/** The money an instance has cost so far, as reported. */
export function totalCost(costPerHour: number, uptime: number): number {
  return roundMoney(accruedCost(costPerHour, uptime));
}
