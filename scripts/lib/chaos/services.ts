// The chaos run's own PostgreSQL and redis-server, so it can really stop them: a throw-away
// cluster (initdb into a temporary directory with the server binaries of
// /usr/lib/postgresql/<version>/bin, a free port, trust authentication) and a redis-server on
// a free port without persistence. The machine's own servers on 5432 and 6379 are never
// touched; every process here is started by this module and stopped by its pid.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, openSync } from 'node:fs';
import { chown, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../free-port.ts';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A server process this run owns: stop and start it again on the same port. */
export type OwnServer = {
  url: string;
  port: number;
  readonly running: boolean;
  start(): Promise<void>;
  /** Postgres: a fast shutdown (SIGINT); Redis: SIGKILL. Resolves once the process has exited. */
  stop(): Promise<void>;
  /** Stops the server and deletes everything it wrote. */
  remove(): Promise<void>;
};

/** This run's PostgreSQL: also frozen in place, its connections held open and unanswered. */
export type OwnPostgres = OwnServer & {
  logFile: string;
  /**
   * Stops every process of the server (SIGSTOP): the postmaster first, so it forks no new
   * backend, then its backends. The kernel still accepts connections and keeps the open ones,
   * but nothing answers: a server hung, or a network that drops packets, not one refused.
   */
  freeze(): Promise<void>;
  /** Lets them run again (SIGCONT); what waited on them is answered then. */
  thaw(): Promise<void>;
};

/** The processes whose parent is `pid`, read from /proc. */
async function childPids(pid: number): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) {
      continue;
    }
    // stat is "pid (comm) state ppid ...": the command may hold spaces and parentheses.
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === pid) {
      found.push(Number(entry));
    }
  }
  return found;
}

/** The newest PostgreSQL server binaries on this machine (CHAOS_PG_BIN overrides), or why there are none. */
export async function postgresBinDir(env: Record<string, string | undefined> = process.env): Promise<string> {
  if (env.CHAOS_PG_BIN) {
    return env.CHAOS_PG_BIN;
  }
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base) ? (await readdir(base)).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a)) : [];
  const found = versions
    .map((v) => join(base, v, 'bin'))
    .find((dir) => existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres')));
  if (!found) {
    throw new Error(`no PostgreSQL server binaries under ${base}/<version>/bin (apt-get install postgresql, or set CHAOS_PG_BIN)`);
  }
  return found;
}

/** initdb and postgres refuse to run as root: as root, they run as the `postgres` user. */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) {
    return undefined;
  }
  const line = (await readFile('/etc/passwd', 'utf8')).split('\n').find((l) => l.startsWith('postgres:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (uid === undefined || gid === undefined) {
    throw new Error('running as root, and there is no postgres user to run the PostgreSQL server as');
  }
  return { uid: Number(uid), gid: Number(gid) };
}

/** Waits until `probe` resolves true, or throws after `timeoutMs` (or what the probe throws: it gave up). */
async function until(what: string, probe: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) {
      throw new Error(`${what} did not come up within ${timeoutMs} ms`);
    }
    await sleep(100);
  }
}

/** The servers running now: if this process dies without stopping them, they go with it. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) {
    child.kill('SIGKILL');
  }
});

/** Remembers a started server until it exits. */
function track(child: ChildProcess): ChildProcess {
  live.add(child);
  child.once('exit', () => live.delete(child));
  return child;
}

/** Sends `signal` to a child and waits for its exit; SIGKILL after `graceMs`. */
async function endProcess(child: ChildProcess, signal: NodeJS.Signals, graceMs = 20_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const exited = once(child, 'exit');
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** A throw-away PostgreSQL cluster on a free port; `url` is its `postgres` database, user postgres, no password. */
export async function startOwnPostgres(): Promise<OwnPostgres> {
  const bin = await postgresBinDir();
  const user = await serverUser();
  const dir = await mkdtemp(join(tmpdir(), 'edge-seckill-chaos-pg-'));
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  const ids = user ? { uid: user.uid, gid: user.gid } : {};
  if (user) {
    await chown(dir, user.uid, user.gid);
  }
  await run(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--no-locale'], {
    ...ids,
    env: { ...process.env, LC_ALL: 'C' },
  });
  const port = await freePort();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let child: ChildProcess | undefined;

  const signalAll = async (signal: NodeJS.Signals) => {
    const pid = child?.pid;
    if (pid === undefined || !server.running) {
      throw new Error('PostgreSQL is not running');
    }
    if (signal === 'SIGSTOP') {
      process.kill(pid, signal);
    }
    for (const backend of await childPids(pid)) {
      try {
        process.kill(backend, signal);
      } catch {
        // A backend that ended meanwhile.
      }
    }
    if (signal === 'SIGCONT') {
      process.kill(pid, signal);
    }
  };
  const server: OwnPostgres = {
    url,
    port,
    logFile,
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    async start() {
      if (server.running) {
        return;
      }
      // A throw-away cluster: no fsync (nothing here must survive a power cut), sockets in its own directory.
      const args = ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'];
      args.push('-c', 'max_connections=200');
      const log = openSync(logFile, 'a');
      const started = track(spawn(join(bin, 'postgres'), args, { ...ids, stdio: ['ignore', log, log] }));
      closeSync(log);
      child = started;
      await until(
        `PostgreSQL on port ${port}`,
        async () => {
          if (!server.running) {
            throw new Error(`PostgreSQL exited (code ${started.exitCode}); see ${logFile}`);
          }
          const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
          client.on('error', () => {});
          try {
            await client.connect();
            await client.end();
            return true;
          } catch {
            return false;
          }
        },
        30_000,
      );
    },
    async stop() {
      if (child) {
        // A frozen server cannot hear the shutdown.
        await signalAll('SIGCONT').catch(() => {});
        await endProcess(child, 'SIGINT');
      }
    },
    freeze: () => signalAll('SIGSTOP'),
    thaw: () => signalAll('SIGCONT'),
    async remove() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await server.start();
  } catch (error) {
    await server.remove();
    throw error;
  }
  return server;
}

/** Answers true once something on 127.0.0.1:`port` replies +PONG to PING. */
function redisPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => done(chunk.toString().startsWith('+PONG')));
  });
}

/** A redis-server of this run alone on a free port: no persistence, so a restart comes back empty. */
export async function startOwnRedis(): Promise<OwnServer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'edge-seckill-chaos-redis-'));
  let child: ChildProcess | undefined;
  const server: OwnServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    async start() {
      if (server.running) {
        return;
      }
      const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
      const started = track(spawn('redis-server', args, { stdio: 'ignore' }));
      let spawnError: Error | undefined;
      started.on('error', (error) => {
        spawnError = error;
      });
      child = started;
      await until(
        `redis-server on port ${port}`,
        async () => {
          if (spawnError) {
            throw new Error(`redis-server could not start: ${spawnError.message} (apt-get install redis-server)`);
          }
          return redisPing(port);
        },
        15_000,
      );
    },
    async stop() {
      if (child) {
        await endProcess(child, 'SIGKILL');
      }
    },
    async remove() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await server.start();
  } catch (error) {
    await server.remove();
    throw error;
  }
  return server;
}
