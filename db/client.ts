import { neon, neonConfig, Pool, type PoolClient } from '@neondatabase/serverless';
import { drizzle as drizzleHttp, type NeonHttpDatabase } from 'drizzle-orm/neon-http';
import { drizzle, type NeonDatabase } from 'drizzle-orm/neon-serverless';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { PostgresConnectError } from './outage';
import * as schema from './schema';

export type Db = NeonDatabase<typeof schema>;
/** Drizzle over Neon's SQL-over-HTTP endpoint: every statement is one fetch and its own transaction. */
export type HttpDb = NeonHttpDatabase<typeof schema>;
/** Either client, for queries of one statement: a pool's (inside a transaction) or the HTTP one. */
export type AnyDb = PgDatabase<PgQueryResultHKT, typeof schema>;

export type DbOptions = {
  databaseUrl: string;
  /**
   * host:port of the local bridge, which stands in for Neon's two front doors: WebSocket
   * (`/v1`) and SQL over HTTP (`/sql`). Unset in production, where Neon serves both.
   */
  wsProxy?: string | undefined;
  /** Connections per pool; Workers allow 6 sockets per invocation. */
  max?: number;
};

let configuredProxy: string | undefined;

function configureDriver(wsProxy: string | undefined): void {
  if (!wsProxy || configuredProxy === wsProxy) {
    return;
  }
  // neonConfig is module-global; every client of this isolate shares one proxy setting.
  neonConfig.wsProxy = (host, port) => `${wsProxy}/v1?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  neonConfig.fetchEndpoint = `http://${wsProxy}/sql`;
  configuredProxy = wsProxy;
}

type ConnectCallback = (err: Error | undefined, client: PoolClient | undefined, done: (release?: unknown) => void) => void;

/**
 * A Neon Pool whose failed connects say what they are. Drizzle's queries wrap what the driver
 * throws (DrizzleQueryError), but a transaction takes its connection with the promise form of
 * connect() outside that wrapper, so a Postgres out of reach surfaced as a bare Error, or on
 * workerd as the WebSocket's ErrorEvent, which is no Error at all (db/outage.ts).
 */
class MarkedPool extends Pool {
  override connect(): Promise<PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<PoolClient> | undefined {
    if (callback) {
      super.connect(callback);
      return undefined;
    }
    return super.connect().catch((cause: unknown) => {
      throw new PostgresConnectError(cause);
    });
  }
}

/**
 * Runs `work` with a Drizzle client on a fresh Neon Pool and always ends the pool: a leaked
 * pool keeps its sockets and exhausts the server's connections. For interactive transactions.
 */
export async function withDb<T>(options: DbOptions, work: (db: Db) => Promise<T>): Promise<T> {
  configureDriver(options.wsProxy);
  const pool = new MarkedPool({ connectionString: options.databaseUrl, max: options.max ?? 5 });
  // An idle client's socket error must not become an unhandled rejection of the isolate.
  pool.on('error', () => {});
  try {
    return await work(drizzle({ client: pool, schema }));
  } finally {
    await pool.end();
  }
}

/**
 * How long a statement over SQL over HTTP that a shopper's request waits on (the goods list's
 * renewal, a rule's statement where the edge has no copy, an order read) may take before it
 * counts as Postgres out of reach: the request then answers from what the isolate has, or 503
 * UNAVAILABLE, which the shopper's retry meets. Without it a Postgres that takes a statement and
 * never answers (a server hung, a network that drops packets, where a stopped one refuses at
 * once) held every such request for as long as it stayed so.
 */
export const SHOPPER_STATEMENT_MS = 2_000;
/**
 * The same for a read in the background that a copy at the edge waits on (a holders copy's
 * renewal): long, since its list may be large and nobody waits on it but the copy.
 */
export const COPY_READ_MS = 10_000;

/**
 * Options the driver spreads into every fetch it makes for a statement: a getter, so each
 * statement gets a deadline of its own from when it is sent. An aborted fetch is the driver's
 * NeonDbError without a SQLSTATE, an outage to postgresUnavailable (db/outage.ts). The other
 * statements (the consumer's writes, the operator's, the webhooks') keep none: on a busy local
 * Postgres they may take seconds and are better late than failed and retried.
 */
function statementDeadline(ms: number): Record<string, unknown> {
  return {
    get signal() {
      return AbortSignal.timeout(ms);
    },
  };
}

/**
 * A Drizzle client over SQL over HTTP, for work that is one statement at a time: no socket to
 * open, authenticate or close (Neon's proxy keeps warm connections behind the endpoint), so
 * nothing to end afterwards. No interactive transactions: those need withDb. With `deadlineMs`,
 * each statement is given up after it.
 */
export function httpDb(options: DbOptions, deadlineMs?: number): HttpDb {
  configureDriver(options.wsProxy);
  const fetchOptions = deadlineMs === undefined ? undefined : statementDeadline(deadlineMs);
  return drizzleHttp({ client: neon(options.databaseUrl, fetchOptions ? { fetchOptions } : {}), schema });
}

/** The database settings of a parsed configuration. */
export function dbOptions(config: { databaseUrl: string; pgWsProxy: string | undefined }, max?: number): DbOptions {
  return { databaseUrl: config.databaseUrl, wsProxy: config.pgWsProxy, ...(max === undefined ? {} : { max }) };
}

/** withDb with a configuration's settings (a pool of `max` connections, 5 by default). */
export function withDbFor<T>(
  config: { databaseUrl: string; pgWsProxy: string | undefined },
  work: (db: Db) => Promise<T>,
  max?: number,
): Promise<T> {
  return withDb(dbOptions(config, max), work);
}
