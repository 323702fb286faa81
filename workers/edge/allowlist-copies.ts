import { allowlistPage } from '../../db/allowlist';
import { dbOptions, httpDb } from '../../db/client';
import type { GoodsRow } from '../../db/goods';
import type { Config } from '../kernel/config';
import { log } from '../kernel/log';
import { fnv1a } from '../kernel/shards';
import type { WaitUntil } from './group-commit';
import { countRenewal, dropShared, readSharedBytes, sharedKey, writeSharedBytes } from './shared-copies';

// An allowlist goods' list at the edge, so the crowd's joins and ticket requests do not each ask
// Postgres whether the shopper is on it. An isolate keeps the list as sorted 53-bit fingerprints
// of the user ids (8 bytes a shopper), one copy per `allowlistVersion` of the goods: every change
// of the list moves the version after it (db/allowlist.ts), and the isolates learn of a new one
// with the goods list they already read (at most 5 s old; at once in the isolate that made the
// change and its data center). A version's copy is loaded once per data center: the first
// isolate to need it reads the list from Postgres in pages, in the background, and leaves the
// fingerprints in the data center's cache (shared-copies.ts), where the others read them (while
// it loads, its mark there keeps the others from loading the same list).
//
// Until an isolate holds the current version's copy, and for a list over MAX_KEPT_IDS, the
// shopper's own statement answers as before. A fingerprint is not the id: two ids share one about
// once in 2^53 / n tries, and such a shopper is let through to the stock object, which keeps the
// list itself and refuses them where the unit is taken. A shopper on the list is never refused by
// a fingerprint.

/** Ids per statement of a load (about 1.5 MB of rows over SQL over HTTP). */
const LOAD_PAGE = 50_000;
/** Above this many shoppers a goods keeps asking Postgres per shopper (the copy would be 16 MB in every isolate). */
const MAX_KEPT_IDS = 2_000_000;
/** How long the data center keeps a version's copy (it is never wrong for its version, only replaced). */
const KEEP_SECONDS = 24 * 3600;
/** A load that failed is tried again after this. */
const RETRY_MS = 5_000;
/** Another isolate of the data center loading the same version: look for its copy again after this. */
const LOOK_AGAIN_MS = 1_000;
/** How long an isolate's mark that it is loading a version holds the data center's others back. */
const LOADING_MARK_SECONDS = 30;
/** What the shared copy holds for a list over MAX_KEPT_IDS: not a whole number of fingerprints. */
const TOO_LARGE = new Uint8Array([1]);
/** The body of a loading mark (only its presence is read). */
const LOADING = new Uint8Array([1]);

/** Fingerprints an isolate keeps over all its goods (32 MB); the copies loaded longest ago go first. */
const MAX_KEPT_FINGERPRINTS = 4_000_000;

type Kept = { version: number; fingerprints: Float64Array | null };
/** Per database and goods, in the order they were loaded: the newest version this isolate has (null fingerprints: too large to keep). */
const kept = new Map<string, Kept>();
/** Per database and goods, while this isolate has no copy of the current version: when it may next try to load one. */
const nextLoad = new Map<string, number>();

/** A 53-bit fingerprint of a user id: FNV-1a above 21 bits of a second, differently mixed hash. */
export function fingerprint(userId: string): number {
  let h = 0x9747b28c;
  for (let i = 0; i < userId.length; i++) {
    h = Math.imul(h ^ userId.charCodeAt(i), 0x5bd1e995);
    h ^= h >>> 15;
  }
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h ^= h >>> 16;
  return fnv1a(userId) * 0x200000 + ((h >>> 0) & 0x1fffff);
}

/** The sorted fingerprints of `ids`. */
export function fingerprintsOf(ids: readonly string[]): Float64Array {
  const out = new Float64Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    out[i] = fingerprint(ids[i] as string);
  }
  return out.sort();
}

/** Whether sorted `fingerprints` hold `value`. */
export function holds(fingerprints: Float64Array, value: number): boolean {
  return fingerprintIndex(fingerprints, value) >= 0;
}

/** The index of `value` in sorted `fingerprints` (binary search), or -1. */
export function fingerprintIndex(fingerprints: Float64Array, value: number): number {
  let lo = 0,
    hi = fingerprints.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const at = fingerprints[mid] as number;
    if (at === value) {
      return mid;
    }
    if (at < value) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return -1;
}

/**
 * Whether the shopper is on the goods' allowlist, from this isolate's copy of the list's current
 * version; undefined when the isolate has none yet (or the list is too large to keep), and the
 * caller asks Postgres. A missing or older copy starts its load here, in the background
 * (`waitUntil`), one per isolate at a time: no shopper waits on a whole list.
 */
export function listedAtEdge(
  config: Config,
  goods: Pick<GoodsRow, 'id' | 'allowlistVersion' | 'createdAt'>,
  userId: string,
  waitUntil: WaitUntil | undefined,
  now = Date.now(),
): boolean | undefined {
  const key = `${config.databaseUrl}|${goods.id}`;
  const copy = kept.get(key);
  // A copy of a newer version than this isolate's goods list names is at least as new as the list.
  if (copy && copy.version >= goods.allowlistVersion) {
    return copy.fingerprints ? holds(copy.fingerprints, fingerprint(userId)) : undefined;
  }
  const next = nextLoad.get(key);
  if (waitUntil && (next === undefined || now >= next)) {
    // No other load starts here for RETRY_MS (one that runs longer is kept from Postgres by its own mark).
    nextLoad.set(key, now + RETRY_MS);
    waitUntil(
      loadCopy(config, goods, goods.allowlistVersion)
        .then((fingerprints) => {
          if (fingerprints === undefined) {
            nextLoad.set(key, Date.now() + LOOK_AGAIN_MS);
            return;
          }
          const current = kept.get(key);
          if (!current || current.version < goods.allowlistVersion) {
            keepCopy(key, { version: goods.allowlistVersion, fingerprints });
          }
          nextLoad.delete(key);
        })
        // The shoppers' own statements answer meanwhile.
        .catch((error: unknown) => log.warn('allowlist.load_failed', { goodsId: goods.id, version: goods.allowlistVersion, error })),
    );
  }
  return undefined;
}

/**
 * Keeps `copy` under `key` as the newest loaded, and drops the copies loaded longest ago while
 * all of them hold more than `max` fingerprints: the goods of sales long over, in an isolate
 * that lives through many. A dropped copy is loaded again (from the data center) if asked for.
 */
export function keepCopy(key: string, copy: Kept, max = MAX_KEPT_FINGERPRINTS): void {
  kept.delete(key);
  kept.set(key, copy);
  let total = 0;
  for (const k of kept.values()) {
    total += k.fingerprints?.length ?? 0;
  }
  for (const [k, v] of kept) {
    if (total <= max || k === key) {
      break;
    }
    kept.delete(k);
    total -= v.fingerprints?.length ?? 0;
  }
}

/**
 * A version's fingerprints: the data center's copy, or Postgres' list, which then becomes that
 * copy; undefined while another isolate of the data center is reading it from Postgres (its
 * mark, kept LOADING_MARK_SECONDS at most, says so), so that a crowd's new isolates starting
 * together make about one load per data center, not one each. Keyed by the goods' creation
 * too: a database made again under the same URL (a local one reset) numbers its goods and
 * versions from the start, and must not read the old one's lists.
 */
export async function loadCopy(
  config: Config,
  goods: Pick<GoodsRow, 'id' | 'createdAt'>,
  version: number,
  page = LOAD_PAGE,
  max = MAX_KEPT_IDS,
): Promise<Float64Array | null | undefined> {
  const key = await sharedKey(config.databaseUrl, allowlistCopyName(goods, version));
  const shared = await readSharedBytes(key);
  if (shared) {
    countRenewal('allowlist', 'data_center');
    return shared.byteLength % 8 === 0 ? new Float64Array(shared) : null;
  }
  const mark = `${key}/loading`;
  if (await readSharedBytes(mark)) {
    return undefined;
  }
  await writeSharedBytes(mark, LOADING, LOADING_MARK_SECONDS);
  try {
    const ids = await listFromPostgres(config, goods.id, page, max).catch((error: unknown) => {
      countRenewal('allowlist', 'failed');
      throw error;
    });
    countRenewal('allowlist', 'postgres');
    const fingerprints = ids ? fingerprintsOf(ids) : null;
    await writeSharedBytes(key, fingerprints ? new Uint8Array(fingerprints.buffer) : TOO_LARGE, KEEP_SECONDS);
    return fingerprints;
  } finally {
    await dropShared(mark);
  }
}

/** The name of a version's copy in the data center's cache. */
export function allowlistCopyName(goods: Pick<GoodsRow, 'id' | 'createdAt'>, version: number): string {
  return `allowlist/${goods.id}/${goods.createdAt.getTime()}/${version}`;
}

/** The goods' whole allowlist in keyset pages; null once it passes `max`. */
async function listFromPostgres(config: Config, goodsId: number, page: number, max: number): Promise<string[] | null> {
  const db = httpDb(dbOptions(config));
  const ids: string[] = [];
  for (;;) {
    const rows = await allowlistPage(db, goodsId, ids.at(-1) ?? null, page);
    for (const id of rows) {
      ids.push(id);
    }
    if (ids.length > max) {
      return null;
    }
    if (rows.length < page) {
      return ids;
    }
  }
}

/** Forgets this isolate's copies (tests: an isolate that has not loaded any). */
export function forgetAllowlists(): void {
  kept.clear();
  nextLoad.clear();
}
