// CPU time the Worker's processes spend, for a per-request cost that does not depend on how
// busy the machine is: under Miniflare every isolate of the stack (the Worker, its objects,
// the queue broker and the local services Miniflare runs beside them) lives in workerd
// processes started by this one, and Linux counts their time in /proc. Elsewhere: unknown.
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's counters (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** User and system time of one process, in ms, and its parent; undefined when it is gone. */
function statOf(pid: string): { ppid: number; comm: string; ms: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "pid (comm) state ppid ... utime stime ...": comm may hold spaces, so split after it.
    const close = stat.lastIndexOf(')');
    const fields = stat.slice(close + 2).split(' ');
    return {
      ppid: Number(fields[1]),
      comm: stat.slice(stat.indexOf('(') + 1, close),
      ms: ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND,
    };
  } catch {
    return undefined;
  }
}

/** CPU ms so far of the workerd processes this process started; undefined off Linux. */
export function workerCpuMs(): number | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return undefined;
  }
  let ms = 0;
  for (const pid of pids) {
    const s = statOf(pid);
    if (s && s.ppid === process.pid && s.comm.startsWith('workerd')) {
      ms += s.ms;
    }
  }
  return ms;
}

/**
 * The workerd processes' CPU ms a second over `windowMs` of nothing asked of them: the stack at
 * rest (its objects' alarms and timers, the queue broker's polls), which a phase's figure per
 * request leaves out. Undefined off Linux.
 */
export async function restingCpuMsPerSecond(windowMs = 1_000): Promise<number | undefined> {
  const before = workerCpuMs();
  const startedAt = performance.now();
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  const after = workerCpuMs();
  return before === undefined || after === undefined ? undefined : ((after - before) * 1000) / (performance.now() - startedAt);
}
