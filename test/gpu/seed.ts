import type { Knex } from "knex";

// Inserts instance records with chosen values, for tests that check computed views (cost,
// statistics, listing) against values computed independently.

export interface SeedInstance {
  id: string;
  status: string;
  gpuName: string;
  costPerHour: number;
  createdAt: Date;
  destroyedAt?: Date;
  templateName?: string;
}

export async function seedInstances(knex: Knex, instances: readonly SeedInstance[]): Promise<void> {
  await knex("gpu_instances").insert(
    instances.map((i) => ({
      instance_id: i.id,
      offer_id: `offer-${i.id}`,
      image_name: "img",
      status: i.status,
      gpu_info: JSON.stringify({ gpu_name: i.gpuName, num_gpus: 1, gpu_ram: 24 }),
      cost_per_hour: i.costPerHour,
      template_name: i.templateName ?? null,
      created_at: i.createdAt,
      updated_at: i.createdAt,
      destroyed_at: i.destroyedAt ?? null,
    })),
  );
}

export const HOUR = 3_600_000;
