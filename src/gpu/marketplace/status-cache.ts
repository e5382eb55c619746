import type { Marketplace, MarketInstance } from "./port.js";

// Status reads of one instance within a couple of seconds reuse the last answer (SPEC.md section
// 2, "Request economy"): a dashboard polling an instance, or a basic and an enhanced read in a
// row, cost one marketplace call. Concurrent reads of one instance share one call. A listing
// refreshes the answers of every instance it holds; a destroy or a failed read forgets one.
// Concurrent destroys of one instance share one call. A read asked `fresh` always calls the
// marketplace (a preemption must be seen at once), and its answer serves the reads after it.

export function withStatusCache(market: Marketplace, ttlMs: number): Marketplace {
  const answers = new Map<string, { at: number; answer: Promise<MarketInstance | undefined> }>();
  const destroying = new Map<string, Promise<void>>();

  function remember(id: string, answer: Promise<MarketInstance | undefined>, at = Date.now()): void {
    answers.set(id, { at, answer });
    answer.catch(() => {
      if (answers.get(id)?.answer === answer) answers.delete(id);
    });
  }

  return {
    costIncludes: market.costIncludes,
    interruptible: market.interruptible,
    ...(market.markets && { markets: market.markets }),
    ...(market.health && { health: () => market.health!() }),
    listOffers: (signal) => market.listOffers(signal),
    searchOffers: (filter, signal) => market.searchOffers(filter, signal),
    createInstance: (request, signal) => market.createInstance(request, signal),
    close: () => market.close(),
    ...(market.changeBid && {
      changeBid: (id: string, bidPerHour: number, signal?: AbortSignal) => {
        answers.delete(id);
        return market.changeBid!(id, bidPerHour, signal).finally(() => answers.delete(id));
      },
    }),

    getInstance(id, signal, options) {
      const cached = answers.get(id);
      if (!options?.fresh && cached && Date.now() - cached.at < ttlMs) return cached.answer;
      const answer = market.getInstance(id, signal, options);
      remember(id, answer);
      return answer;
    },

    async listInstances(labelPrefix, signal) {
      const at = Date.now();
      const listed = await market.listInstances(labelPrefix, signal);
      for (const instance of listed) remember(instance.id, Promise.resolve(instance), at);
      return listed;
    },

    destroyInstance(id, signal) {
      // A destroy asked while one of the same instance is under way (a DELETE and the sync loop
      // finishing it) joins it: one marketplace call, not a second one answered "already gone".
      const running = destroying.get(id);
      if (running) return running;
      answers.delete(id);
      const destroy = market.destroyInstance(id, signal).finally(() => {
        answers.delete(id);
        destroying.delete(id);
      });
      destroying.set(id, destroy);
      return destroy;
    },
  };
}
