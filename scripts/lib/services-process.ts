// The test services in a child process, for a load generator that must not share its event
// loop with them: the embedded Postgres (PGlite runs its queries on the thread that hosts it)
// and the Neon WebSocket bridge each take the thread for every statement the Worker sends, and
// a load generator on that thread stops sending while they run. A benchmark measured that way
// charges the database's work to the system under test twice: once as the CPU it is, and again
// as requests never sent. The classic stack's worker writes Postgres from a process of its own;
// this puts the project's Postgres and bridges in one too.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { tsNode } from './run-ts.ts';
import type { startTestServices, TestServices } from './test-services.ts';

const CHILD = join(fileURLToPath(new URL('.', import.meta.url)), 'services-child.ts');
/** How long the child has to close its services (drop a fresh database) before it is killed. */
const CLOSE_TIMEOUT_MS = 15_000;

type Addresses = Pick<TestServices, 'databaseUrl' | 'silentDatabaseUrl' | 'pgWsProxy' | 'redisRestUrl' | 'redisRestToken'>;

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const exited = once(child, 'exit');
  child.stdin?.end();
  const timer = setTimeout(() => child.kill('SIGKILL'), CLOSE_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
}

/** What can cross to the child: startTestServices' options, less a snapshot (a Blob). */
export type ServicesProcessOptions = Omit<NonNullable<Parameters<typeof startTestServices>[0]>, 'from'>;

/** startTestServices' services, run by a child process; `close()` ends it. */
export async function startServicesProcess(options: ServicesProcessOptions = {}): Promise<TestServices> {
  const [command, args] = tsNode(CHILD, JSON.stringify(options));
  const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  if (!child.stdout) {
    throw new Error('the services process has no stdout');
  }
  const lines = createInterface({ input: child.stdout });
  let addresses: Addresses | undefined;
  try {
    addresses = await Promise.race([
      addressesFrom(lines),
      once(child, 'exit').then(([code]) => {
        throw new Error(`the services process exited with ${code} before it started them`);
      }),
    ]);
  } catch (error) {
    await stop(child);
    throw error;
  } finally {
    lines.close();
  }
  // Whatever else it prints is read and dropped, so a full pipe never stalls it.
  child.stdout.on('data', () => {});
  child.stdout.resume();
  return { ...addresses, snapshot: undefined, close: () => stop(child) };
}

/** The child's line of addresses (any line before it, a library's chatter, is skipped). */
async function addressesFrom(lines: AsyncIterable<string>): Promise<Addresses> {
  for await (const line of lines) {
    if (line.startsWith('{')) {
      const parsed = JSON.parse(line) as Partial<Addresses>;
      if (typeof parsed.databaseUrl === 'string' && typeof parsed.pgWsProxy === 'string') {
        return parsed as Addresses;
      }
    }
  }
  throw new Error('the services process ended its output without their addresses');
}
