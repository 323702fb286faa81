import { getTableColumns } from 'drizzle-orm';
import { seckillGoods } from '../../db/schema';
import { sha256B64 } from '../kernel/crypto';
import { log } from '../kernel/log';
import { count } from '../metrics/registry';

// Copies a data center's isolates share through the Cache API (`caches.default`), of what each
// isolate would otherwise ask Postgres or a Durable Object for on its own: the goods list
// (goods-cache.ts), the stock figures of the goods pages (stock-reads.ts) and the fingerprints of
// an allowlist goods' list (allowlist-copies.ts). A crowd's isolates are thousands, most of them
// in a few data centers; through these the source hears about one read a second (or one load a
// version) per data center instead of one per isolate. A copy only saves work: a read or write
// that fails is logged and the caller asks the source itself, as it does where there is
// no cache (on a workers.dev subdomain the Cache API keeps nothing).

/** The edge's copies, as the metrics name them. */
export type CopyName = 'goods_list' | 'page_stock' | 'allowlist' | 'activity_holders' | 'goods_holders';
/** Where a renewal of a copy came from: the data center's copy, the source itself, or nowhere. */
export type RenewalSource = 'data_center' | 'postgres' | 'mirror' | 'objects' | 'failed';

/** Counts a renewal of an isolate's copy by where it came from (`seckill_edge_copy_renewals_total`). */
export function countRenewal(copy: CopyName, source: RenewalSource): void {
  count('seckill_edge_copy_renewals_total', { copy, source });
}

/** A shared copy: when its source gave it, and what it gave. */
export type SharedCopy<T> = { at: number; value: T };

/** The goods row's columns as this build reads them: a deploy's two builds keep their copies apart. */
const COLUMNS = Object.keys(getTableColumns(seckillGoods)).join(',');

const prefixes = new Map<string, string>();

/**
 * The key of the copy `name` of the deployment whose database is `databaseUrl` (hashed with the
 * columns: the URL holds its password), on a host of its own so that no request to the shop's
 * zone can be answered from it.
 */
export async function sharedKey(databaseUrl: string, name: string): Promise<string> {
  let prefix = prefixes.get(databaseUrl);
  if (prefix === undefined) {
    prefix = `https://shared.edge-seckill.internal/${await sha256B64(`${databaseUrl}|${COLUMNS}`, 22)}`;
    prefixes.set(databaseUrl, prefix);
  }
  return `${prefix}/${name}`;
}

/** The copy under `key`, of any age (the caller judges it); none when there is none or the cache fails. */
export function readShared<T>(key: string): Promise<SharedCopy<T> | undefined> {
  return read(key, (hit) => hit.json<SharedCopy<T>>());
}

/** Leaves `copy` under `key` for the data center's isolates, kept at most `keepSeconds`. */
export function writeShared<T>(key: string, copy: SharedCopy<T>, keepSeconds: number): Promise<void> {
  return write(key, JSON.stringify(copy), 'application/json', keepSeconds);
}

/** The bytes under `key` (a copy whose version is in its key, so never judged by age); none when there are none. */
export function readSharedBytes(key: string): Promise<ArrayBuffer | undefined> {
  return read(key, (hit) => hit.arrayBuffer());
}

/** Leaves `bytes` under `key` for the data center's isolates, kept at most `keepSeconds`. */
export function writeSharedBytes(key: string, bytes: Uint8Array, keepSeconds: number): Promise<void> {
  return write(key, bytes, 'application/octet-stream', keepSeconds);
}

async function read<T>(key: string, body: (hit: Response) => Promise<T>): Promise<T | undefined> {
  try {
    const hit = await caches.default.match(key);
    return hit ? await body(hit) : undefined;
  } catch (error) {
    log.warn('shared_copy.read_failed', { copy: nameOf(key), error });
    return undefined;
  }
}

async function write(key: string, body: string | Uint8Array, contentType: string, keepSeconds: number): Promise<void> {
  try {
    const headers = { 'content-type': contentType, 'cache-control': `max-age=${keepSeconds}` };
    await caches.default.put(key, new Response(body, { headers }));
  } catch (error) {
    log.warn('shared_copy.write_failed', { copy: nameOf(key), error });
  }
}

/** Drops the copy under `key` (an admin change made it wrong before its time). */
export async function dropShared(key: string): Promise<void> {
  try {
    await caches.default.delete(key);
  } catch (error) {
    log.warn('shared_copy.drop_failed', { copy: nameOf(key), error });
  }
}

/** A key's name without the deployment's hash, for the logs. */
function nameOf(key: string): string {
  return key.split('/').slice(4).join('/');
}
