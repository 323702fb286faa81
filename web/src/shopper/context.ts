import type { ServerClock } from '../shared/clock';
import type { I18n } from '../shared/i18n';
import type { ShopperKey } from './messages';
import type { Session } from './session';

/** What the shopper page's parts share. */
export type ShopperContext = {
  i18n: I18n<ShopperKey>;
  clock: ServerClock;
  /** ISO 4217 code from `<meta name="currency">`. */
  currency: string;
  session(): Session | undefined;
  /** A call answered 401: the session is no longer valid. */
  sessionExpired(): void;
  /** Moves keyboard focus to the sign-in field (the buy button's action when signed out). */
  focusSignIn(): void;
};

export { sleep } from '../../../workers/kernel/sleep';
/**
 * A new Idempotency-Key: a UUID version 7 (its time, then random bits), so the purchase's request
 * id, derived from it, sorts by time where the goods' object indexes it. getRandomValues needs no
 * secure context, where randomUUID did.
 */
export { timeOrderedKey as newKey } from '../../../workers/kernel/time-order';

/** localStorage keys for what survives a reload: the pending request and the order. */
export const storageKeys = {
  pending: (userId: string, goodsId: number) => `seckill:pending:${userId}:${goodsId}`,
  order: (userId: string, goodsId: number) => `seckill:order:${userId}:${goodsId}`,
};
