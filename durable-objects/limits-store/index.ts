import { DurableObject } from 'cloudflare:workers';
import type { StoredLimits } from '../../workers/kernel/contract';
import { DEFAULT_LIMITS, LimitsPatch } from '../../workers/kernel/limits';
import { legacyLimitsHolder } from '../routing';
import { applyPatch, readStoredLimits } from './rules';
import { LimitsStorage, type StoredRecord } from './storage';

/**
 * The one durable record of the runtime limits (the traffic switch): stored values over the
 * defaults. Isolates read it through their few-seconds copy (workers/edge/limits.ts).
 */
export class LimitsStore extends DurableObject<Env> {
  private readonly store: LimitsStorage;
  private limits: StoredLimits | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new LimitsStorage(ctx.storage.sql);
    this.store.migrate();
  }

  /** The runtime limits: the stored record over the defaults. */
  async getLimits(): Promise<StoredLimits> {
    if (!this.limits) {
      const record = this.store.read() ?? (await this.carryOver());
      this.limits = record
        ? { limits: readStoredLimits(parseJson(record.value)), updatedAt: new Date(record.updatedAt).toISOString() }
        : { limits: { ...DEFAULT_LIMITS }, updatedAt: null };
    }
    return this.limits;
  }

  /** Applies a change to the runtime limits and stores the whole record. */
  async setLimits(patch: LimitsPatch): Promise<StoredLimits> {
    const change = LimitsPatch.parse(patch);
    const current = await this.getLimits();
    const next = applyPatch(current.limits, change);
    const now = Date.now();
    this.store.write({ value: JSON.stringify(next), updatedAt: now });
    this.limits = { limits: next, updatedAt: new Date(now).toISOString() };
    return this.limits;
  }

  /**
   * Builds before this store kept the limits in an EdgeGuard instance (`config:limits`). The
   * first read without a record of its own copies that one here, once; until it could be asked,
   * reads fail (the isolates keep their copies) rather than fall back to the defaults.
   */
  private async carryOver(): Promise<StoredRecord | undefined> {
    if (this.store.carried()) {
      return undefined;
    }
    let carried: StoredRecord | undefined;
    await this.ctx.blockConcurrencyWhile(async () => {
      carried = this.store.read();
      if (carried || this.store.carried()) {
        return;
      }
      const legacy = await legacyLimitsHolder(this.env).legacyLimits();
      if (legacy) {
        this.store.write(legacy);
      }
      this.store.markCarried();
      carried = legacy;
    });
    return carried;
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
