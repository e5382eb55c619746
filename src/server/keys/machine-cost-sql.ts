// A key's machine cost (SPEC.md section 2, "Keys for callers", "Dollars, two ways"): each minute,
// what an endpoint's machines billed during that minute, split over the keys by their share of
// that minute's tokens (prompt and completion, every process's rows of the minute together).
// Minutes with no tokens stay unattributed (0).
//
// The minute's dollars come from the instance records of the endpoint's replicas, as the fleet's
// spend and an endpoint's total cost count them: a record bills its cost_per_hour from its
// creation to its end (destroyed_at; now while it lives; one that ends before it starts bills
// nothing), and a minute gets the part of that span inside it. (The history's samples hold only
// the $/h at each minute's end, which misses a machine that came or went within the minute.)
//
// Money in integer micro-dollars: a minute's dollars are rounded once, then split over its rows
// by running sums in (key, process) order: each row gets floor(D x tokens so far / all tokens)
// less the same before it. The shares add up to the minute's dollars exactly, and a key's rows,
// being next to each other in that order, add up to its exact share within a micro-dollar
// (exactly, when the share is a whole micro-dollar).

/**
 * Sets machine_cost_micros on every row of `usageTable` whose minute is in [:from, :to), as the
 * instance records and the rows stand now; rows already right are left alone. Absolute, so that
 * running it again over the same minutes corrects a row published late or a machine's end
 * recorded late, and changes nothing otherwise.
 */
export function attributeMachineCostSql(usageTable: string): string {
  return `
  with asked as (
    select distinct endpoint_name, minute from ${usageTable} where minute >= :from and minute < :to
  ),
  billing as (
    select i.endpoint as endpoint_name, i.created_at as starts, coalesce(i.destroyed_at, now()) as ends, i.cost_per_hour as rate
    from gpu_instances i
    where i.endpoint in (select endpoint_name from asked)
      and (i.destroyed_at is null or i.destroyed_at > :from) and i.created_at < :to
      and coalesce(i.destroyed_at, now()) > i.created_at
  ),
  minute_dollars as (
    select a.endpoint_name, a.minute,
           round(sum(b.rate * extract(epoch from least(b.ends, a.minute + interval '1 minute') - greatest(b.starts, a.minute))) / 3600 * 1e6)::bigint as micros
    from asked a join billing b on b.endpoint_name = a.endpoint_name and b.starts < a.minute + interval '1 minute' and b.ends > a.minute
    group by a.endpoint_name, a.minute
  ),
  running as (
    select u.key_name, u.endpoint_name, u.minute, u.process_id, u.prompt_tokens + u.completion_tokens as tokens, coalesce(d.micros, 0) as micros,
           sum(u.prompt_tokens + u.completion_tokens) over (partition by u.endpoint_name, u.minute order by u.key_name, u.process_id) as upto,
           sum(u.prompt_tokens + u.completion_tokens) over (partition by u.endpoint_name, u.minute) as total
    from ${usageTable} u left join minute_dollars d on d.endpoint_name = u.endpoint_name and d.minute = u.minute
    where u.minute >= :from and u.minute < :to
  ),
  shares as (
    select key_name, endpoint_name, minute, process_id,
           case when total > 0 then (div(micros * upto, total) - div(micros * (upto - tokens), total))::bigint else 0 end as micros
    from running
  )
  update ${usageTable} u set machine_cost_micros = s.micros
  from shares s
  where u.key_name = s.key_name and u.endpoint_name = s.endpoint_name and u.minute = s.minute and u.process_id = s.process_id
    and u.machine_cost_micros <> s.micros`;
}
