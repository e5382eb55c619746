// A key's machine cost (SPEC.md section 2, "Keys for callers", "Dollars, two ways"): each minute,
// what an endpoint's machines billed during that minute, split over the keys by their share of
// that minute's tokens (prompt and completion, every process's rows of the minute together).
// Minutes with no tokens stay unattributed. Computed at read time, so that nothing is written
// twice and a minute published late, or a machine's end recorded late, corrects itself.
//
// The minute's dollars come from the instance records, as the fleet's spend and an endpoint's
// total cost count them: a record bills its cost_per_hour from its creation to its end
// (destroyed_at; now while it lives), and a minute gets the part of that span inside it. (The
// history's samples hold only the $/h at each minute's end, which misses a machine that came or
// went within the minute.) Money in integer micro-dollars: a minute's dollars are rounded once,
// then split by running sums in key order (each key gets floor(D x tokens so far / all tokens)
// less the same for the keys before it), so that the shares add up to the minute's dollars
// exactly and each is within a micro-dollar of its exact share.

/**
 * CTEs to put after a CTE `wanted(key_name, endpoint_name, minute)`: the usage minutes whose
 * machine cost is asked. They end in `machine_costs(key_name, endpoint_name, minute,
 * machine_cost_micros)`, one row per wanted minute that holds tokens. `:costFrom` must be at or
 * before the first wanted minute: only the usage rows from it on are read.
 */
export function machineCostCtes(usageTable: string): string {
  return `
  asked as (select distinct endpoint_name, minute from wanted),
  minute_tokens as (
    select u.endpoint_name, u.minute, u.key_name, sum(u.prompt_tokens + u.completion_tokens) as tokens
    from ${usageTable} u join asked a on a.endpoint_name = u.endpoint_name and a.minute = u.minute
    where u.minute >= :costFrom
    group by u.endpoint_name, u.minute, u.key_name
  ),
  billing as (
    select i.endpoint as endpoint_name, i.created_at as starts, coalesce(i.destroyed_at, now()) as ends, i.cost_per_hour as rate
    from gpu_instances i
    where i.endpoint in (select endpoint_name from asked)
      and (i.destroyed_at is null or i.destroyed_at > :costFrom)
      and i.created_at < (select max(minute) from asked) + interval '1 minute'
  ),
  minute_dollars as (
    select a.endpoint_name, a.minute,
           round(sum(b.rate * extract(epoch from least(b.ends, a.minute + interval '1 minute') - greatest(b.starts, a.minute))) / 3600 * 1e6)::bigint as micros
    from asked a join billing b on b.endpoint_name = a.endpoint_name and b.starts < a.minute + interval '1 minute' and b.ends > a.minute
    group by a.endpoint_name, a.minute
  ),
  running as (
    select t.key_name, t.endpoint_name, t.minute, t.tokens, d.micros,
           sum(t.tokens) over (partition by t.endpoint_name, t.minute order by t.key_name) as upto,
           sum(t.tokens) over (partition by t.endpoint_name, t.minute) as total
    from minute_tokens t join minute_dollars d on d.endpoint_name = t.endpoint_name and d.minute = t.minute
  ),
  machine_costs as (
    select r.key_name, r.endpoint_name, r.minute, (div(r.micros * r.upto, r.total) - div(r.micros * (r.upto - r.tokens), r.total))::bigint as machine_cost_micros
    from running r join wanted w on w.key_name = r.key_name and w.endpoint_name = r.endpoint_name and w.minute = r.minute
    where r.total > 0
  )`;
}
