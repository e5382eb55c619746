// One limit of one key as one process sees it: what its lease lets it use, and what it uses.
// Everything this process used and has not yet reported to the database lives inside its lease:
// answers in flight (`held`), what ended since the last report (`pending`), and what a report on
// its way carries (`reporting`). The process never lets that sum pass the lease (`cap`).

export class Meter {
  /** What the lease covers; no limit: no lease. */
  cap: number;
  held = 0;
  pending = 0;
  reporting = 0;
  /** The largest admission's ask since the last report: one unit of the next lease. */
  largestAsk = 0;

  constructor(public limit: number | undefined) {
    this.cap = limit === undefined ? Infinity : 0;
  }

  /** A changed limit: a new one needs a lease first, a removed one none; a changed one applies at the next renewal. */
  setLimit(limit: number | undefined): void {
    if (limit === undefined) this.cap = Infinity;
    else if (this.limit === undefined) this.cap = 0;
    this.limit = limit;
  }

  get limited(): boolean {
    return this.limit !== undefined;
  }

  get used(): number {
    return this.held + this.pending + this.reporting;
  }

  fits(amount: number): boolean {
    return this.used + amount <= this.cap;
  }

  /** An admission asked for `amount`: the largest one sizes the next lease's units. */
  ask(amount: number): void {
    if (amount > this.largestAsk) this.largestAsk = amount;
  }

  /** What the lease still leaves free. */
  get free(): number {
    return this.cap - this.used;
  }

  /**
   * A report leaves with what ended since the last one, and keeps `reserve` of what its lease left
   * free. Until its answer comes this process uses no more than what is in flight and that reserve:
   * the database always grants at least that much (it was in this lease, nobody else could have
   * taken it), so the lease covers this process whichever way the answer goes, and admissions go on
   * while the report travels.
   */
  startReport(reserve = 0): number {
    this.reporting = this.pending;
    this.pending = 0;
    if (this.limited) this.cap = Math.min(this.cap, this.reporting + this.held + reserve);
    return this.reporting;
  }

  reportDone(granted: number | null): void {
    this.reporting = 0;
    if (this.limited) this.cap = granted ?? 0;
  }

  /** Whether the database counted the report or not, counting it again is safe: it is reported again. */
  reportFailed(): void {
    this.pending += this.reporting;
    this.reporting = 0;
  }

  /** The lease ran out unrenewed: the database counts all of it as used; this process starts afresh. */
  lapse(): void {
    this.held = this.pending = this.reporting = 0;
    if (this.limited) this.cap = 0;
  }
}
