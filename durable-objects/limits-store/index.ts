import { DurableObject } from 'cloudflare:workers';
import type { StoredLimits } from '../../workers/kernel/contract';
import { LIMITS_RESET_NAME, resetEdgeObjectIfAsked, resetIfAsked } from '../../workers/kernel/dev-faults';
import { DEFAULT_LIMITS, LimitsPatch } from '../../workers/kernel/limits';
import { log } from '../../workers/kernel/log';
import { callWithin } from '../../workers/kernel/within';
import { allLimitsReplicas, legacyLimitsHolder, limitsStore } from '../routing';
import { applyPatch, readStoredLimits } from './rules';
import { LimitsStorage, type StoredRecord } from './storage';

/** A copy re-reads the store when its copy is this old (a push it missed is at most this late). */
const REPLICA_TTL_MS = 1_000;

/**
 * The one durable record of the runtime limits (the traffic switch): stored values over the
 * defaults. Isolates read it through their few-seconds copy (workers/edge/limits.ts), fetched
 * from one of LIMITS_REPLICAS copies (instances of this class named `limits:replica:N`, see
 * ../routing): the store pushes each change to every copy, and a copy re-reads the store once
 * a second otherwise, so the store hears from a few copies, not from every isolate.
 */
export class LimitsStore extends DurableObject<Env> {
  private readonly store: LimitsStorage;
  private limits: StoredLimits | undefined;
  private copy: { limits: StoredLimits; at: number } | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new LimitsStorage(ctx.storage.sql);
    this.store.migrate();
  }

  /** The runtime limits: the stored record over the defaults. */
  async getLimits(): Promise<StoredLimits> {
    this.devReset(true);
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
    this.devReset(true);
    const change = LimitsPatch.parse(patch);
    const current = await this.getLimits();
    const next = applyPatch(current.limits, change);
    const now = Date.now();
    this.store.write({ value: JSON.stringify(next), updatedAt: now });
    const stored = { limits: next, updatedAt: new Date(now).toISOString() };
    this.limits = stored;
    await Promise.all(
      allLimitsReplicas(this.env).map((replica) =>
        // A copy that misses the push (or never answers it: the change is not held for it)
        // re-reads the store within REPLICA_TTL_MS.
        callWithin(replica.replicate(stored), 'a limits copy').catch((error: unknown) => log.warn('limits.replicate_failed', { error })),
      ),
    );
    return stored;
  }

  /**
   * Dev builds: this instance goes, before it reads or writes, when a reset of it was asked for
   * (dev-faults.ts): by its own name, or as the store (not a copy) by LIMITS_RESET_NAME.
   */
  private devReset(asStore: boolean): void {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      if (asStore) {
        resetIfAsked(this.ctx, LIMITS_RESET_NAME);
      }
      resetEdgeObjectIfAsked(this.ctx);
    }
  }

  /** As a copy: the limits, re-read from the store when the copy is over a second old. */
  async replicaLimits(): Promise<StoredLimits> {
    this.devReset(false);
    const now = Date.now();
    if (this.copy && now - this.copy.at < REPLICA_TTL_MS) {
      return this.copy.limits;
    }
    try {
      // A copy of the answer, not the answer: workerd gives an RPC result a disposer, and an RPC
      // method that returns such an object hands every caller a result it must dispose (each
      // isolate's read left one for the garbage collector, and workerd warned of it).
      const limits = structuredClone(await limitsStore(this.env).getLimits());
      this.copy = { limits, at: Date.now() };
      return limits;
    } catch (error) {
      if (!this.copy) {
        throw error;
      }
      // The store is unreachable: the last copy serves, and is asked about again shortly.
      log.warn('limits.replica_refresh_failed', { error });
      this.copy = { limits: this.copy.limits, at: now - REPLICA_TTL_MS + 200 };
      return this.copy.limits;
    }
  }

  /** As a copy: takes a change the store pushed. */
  async replicate(limits: StoredLimits): Promise<void> {
    this.copy = { limits, at: Date.now() };
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
