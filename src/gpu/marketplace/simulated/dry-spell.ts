// A shortage on the simulated marketplace: from `fromMs` until `untilMs` (Date.now's clock) the
// market has no rentable offer at all, as a real one does when every fitting machine is taken or
// priced past the caps. Machines already rented keep running; only new rentals are refused.

export interface DrySpell {
  /** Epoch ms the shortage begins (inclusive). */
  fromMs: number;
  /** Epoch ms it ends (exclusive). */
  untilMs: number;
}

export function isDry(spell: DrySpell | undefined, now = Date.now()): boolean {
  return spell !== undefined && now >= spell.fromMs && now < spell.untilMs;
}

/** The spell checked at the door: a clear error instead of a spell that can never hold. */
export function checkedSpell(spell: DrySpell | undefined): DrySpell | undefined {
  if (spell !== undefined && !(Number.isFinite(spell.fromMs) && Number.isFinite(spell.untilMs) && spell.untilMs > spell.fromMs)) {
    throw new Error(`a dry spell needs finite fromMs < untilMs, got ${JSON.stringify(spell)}`);
  }
  return spell;
}
