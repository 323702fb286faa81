// What the bench's phases share: the run's context (its options, clients, the load generator and
// the stack's counters) and the goods each phase makes, whose invariants bench.ts checks.

import type { AdminApi } from '../load/admin.ts';
import type { HttpClient } from '../load/http-client.ts';
import type { PhaseOptions, PhaseResult } from './cannon.ts';
import type { BenchSecrets, Minter } from './mint.ts';
import type { ObjectCallsApi } from './objects.ts';
import type { BenchOptions } from './options.ts';
import type { Profiler } from './profile.ts';

export type BenchContext = {
  o: BenchOptions;
  url: string;
  http: HttpClient;
  admin: AdminApi;
  calls: ObjectCallsApi;
  minter: Minter;
  secrets: BenchSecrets;
  profiler: Profiler;
  scriptPath: string;
  phase: (extra: Partial<PhaseOptions>) => Promise<PhaseResult>;
  /** Headers every request of the run carries (the client address Cloudflare's edge would set). */
  clientHeaders: Record<string, string>;
  /** SQL-over-HTTP requests the local Postgres bridge has taken since it started (ws-bridge.ts). */
  sqlRequests: () => Promise<number>;
  /** Pauses the order consumer for `seconds` (0: resumes it). */
  pauseConsumer: (seconds: number) => Promise<void>;
  say: (line: string) => void;
};
export type CheckedGoods = { name: string; goodsId: number; accepted: Set<string> };

/** A goods on sale now with `stock` units (and any contract-addition settings). */
export async function saleGoods(
  c: BenchContext,
  title: string,
  stock: number,
  settings?: Parameters<AdminApi['createGoods']>[0]['settings'],
) {
  return c.admin.createGoods({ stock, title: `Bench: ${title}`, ...(settings ? { settings } : {}) });
}
