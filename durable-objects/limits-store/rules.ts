import { DEFAULT_LIMITS, LIMIT_FIELDS, Limits, type LimitsPatch } from '../../workers/kernel/limits';

// How the limits store turns a change and a stored record into the record it keeps. Pure.

/** Applies a validated patch; the result is validated again so stored limits are always whole. */
export function applyPatch(current: Limits, patch: LimitsPatch): Limits {
  const { admissionByGoods, ...rest } = patch;
  const byGoods: Record<string, number> = { ...current.admissionByGoods };
  for (const [goodsId, rate] of Object.entries(admissionByGoods ?? {})) {
    if (rate === null) {
      delete byGoods[goodsId];
    } else {
      byGoods[goodsId] = rate;
    }
  }
  return Limits.parse({ ...current, ...rest, admissionByGoods: byGoods });
}

/**
 * Reads stored limits written by any earlier version: unknown fields are dropped, missing or
 * invalid ones take their default, so adding a limit later needs no data migration.
 */
export function readStoredLimits(raw: unknown): Limits {
  const source = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {};
  const out: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(LIMIT_FIELDS)) {
    const parsed = schema.safeParse(source[name]);
    out[name] = parsed.success ? parsed.data : DEFAULT_LIMITS[name as keyof Limits];
  }
  return Limits.parse(out);
}
