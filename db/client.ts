import { neonConfig, Pool } from '@neondatabase/serverless';
import { drizzle, type NeonDatabase } from 'drizzle-orm/neon-serverless';
import * as schema from './schema';

export type Db = NeonDatabase<typeof schema>;

export type DbOptions = {
  databaseUrl: string;
  /** host:port of a local WebSocket->TCP bridge; unset in production (Neon speaks WebSocket). */
  wsProxy?: string | undefined;
  /** Connections per pool; Workers allow 6 sockets per invocation. */
  max?: number;
};

let configuredProxy: string | undefined;

function configureDriver(wsProxy: string | undefined): void {
  if (!wsProxy || configuredProxy === wsProxy) {
    return;
  }
  // neonConfig is module-global; every pool of this isolate shares one proxy setting.
  neonConfig.wsProxy = (host, port) => `${wsProxy}/v1?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  configuredProxy = wsProxy;
}

/**
 * Runs `work` with a Drizzle client on a fresh Neon Pool and always ends the pool: a leaked
 * pool keeps its sockets and exhausts the server's connections.
 */
export async function withDb<T>(options: DbOptions, work: (db: Db) => Promise<T>): Promise<T> {
  configureDriver(options.wsProxy);
  const pool = new Pool({ connectionString: options.databaseUrl, max: options.max ?? 5 });
  // An idle client's socket error must not become an unhandled rejection of the isolate.
  pool.on('error', () => {});
  try {
    return await work(drizzle({ client: pool, schema }));
  } finally {
    await pool.end();
  }
}
