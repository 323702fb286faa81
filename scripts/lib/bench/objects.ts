// Durable Object calls as the bench measures them: the Worker's own counts by class and method
// (workers/kernel/object-calls.ts, read and switched through /admin/dev/faults/object-calls), a
// shopper's whole journey through the HTTP flow, and the CPU each class's code spent, from a CPU
// profile of the isolate that runs the Worker and its objects.
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { heldReadTimeoutMs, resultPollPause, resultReadPath } from '../../../web/src/shopper/pacing.ts';
import type { CallCount, ObjectCallCounts, ObjectCallsBody, ObjectCallsView } from '../../../workers/kernel/object-calls.ts';
import type { HttpClient } from '../load/http-client.ts';
import { percentiles, round } from '../load/metrics.ts';
import { challengeAnswer } from '../load/shoppers.ts';
import type { BenchUser } from './mint.ts';
import type { CpuProfile } from './profile.ts';

export type { CallCount };
/** Calls by object class, summed over methods. */
export type ClassCalls = Record<string, CallCount>;

/** The Worker's object-call switches and counts. */
export function objectCallsApi(http: HttpClient, token: string) {
  const headers = { authorization: `Bearer ${token}` };
  const PATH = '/admin/dev/faults/object-calls';
  const check = (status: number, body: string, what: string) => {
    if (status !== 200) {
      throw new Error(`${what}: HTTP ${status} ${body.slice(0, 200)} (a dev build with DEV_MODE is needed)`);
    }
  };
  return {
    async set(body: ObjectCallsBody): Promise<void> {
      const answer = await http.put(PATH, { headers, json: body });
      check(answer.status, answer.body, 'switching the object-call counts');
    },
    async read(): Promise<ObjectCallCounts> {
      const answer = await http.get(PATH, { headers });
      check(answer.status, answer.body, 'reading the object-call counts');
      return (answer.json as ObjectCallsView).counts;
    },
  };
}
export type ObjectCallsApi = ReturnType<typeof objectCallsApi>;

/** Sums each class's methods. */
export function byClass(counts: ObjectCallCounts): ClassCalls {
  const out: ClassCalls = {};
  for (const [cls, methods] of Object.entries(counts)) {
    out[cls] = Object.values(methods).reduce((a, c) => ({ calls: a.calls + c.calls, items: a.items + c.items }), { calls: 0, items: 0 });
  }
  return out;
}

/** Purchases one `reserveMany` call carried on average (the edge's group commit), or null when none was made. */
export function purchasesPerStockCall(counts: ObjectCallCounts): number | null {
  const reserve = counts.GoodsStock?.reserveMany;
  return reserve && reserve.calls > 0 ? round(reserve.items / reserve.calls, 1) : null;
}

/** The counts of a stretch of the run: zeroed before `run`, read after it. */
export async function countCalls<T>(api: ObjectCallsApi, run: () => Promise<T>): Promise<{ result: T; counts: ObjectCallCounts }> {
  await api.set({ reset: true });
  const result = await run();
  return { result, counts: await api.read() };
}

/** A journey stops polling after this many (the page slows down after ten and gives up after minutes). */
const MAX_RESULT_POLLS = 30;

/** What a journey's walk measured. */
export type JourneyWalk = {
  shoppers: number;
  accepted: number;
  refused: Record<string, number>;
  /** Result polls the accepted shoppers made until their answer was final. */
  resultPolls: number;
  /** Accepted purchases whose answer was final (SUCCESS or FAIL) within MAX_RESULT_POLLS. */
  final: number;
  /** From the 202 to the poll that saw the final answer (ms). */
  finalMs: { p50Ms: number | null; p90Ms: number | null };
};

/**
 * Shoppers through the HTTP flow one by one per worker (challenge, its answer, token, purchase,
 * then the result until it is final, polled as the shopper page polls it: at once after the
 * 202 with `?wait=`, each poll held by the stock object until the order is written), as the
 * shopper page does; returns how
 * many the purchase accepted and how many polls their answers took.
 */
export async function journeys({
  http,
  goodsId,
  users,
  concurrency,
}: {
  http: HttpClient;
  goodsId: number;
  users: BenchUser[];
  concurrency: number;
}): Promise<JourneyWalk> {
  let next = 0;
  let accepted = 0;
  let resultPolls = 0;
  const finalMs: number[] = [];
  const refused: Record<string, number> = {};
  const refuse = (step: string, status: number) => {
    const key = `${step} ${status}`;
    refused[key] = (refused[key] ?? 0) + 1;
  };
  const worker = async () => {
    for (let u = users[next++]; u; u = users[next++]) {
      const headers = { authorization: `Bearer ${u.jwt}` };
      const challenge = await http.post(`/api/seckill/goods/${goodsId}/challenge`, { headers });
      if (challenge.status !== 200) {
        refuse('challenge', challenge.status);
        continue;
      }
      const answer = await challengeAnswer(challenge.json);
      if (answer.error) {
        throw new Error(answer.error);
      }
      const token = await http.post(`/api/seckill/goods/${goodsId}/token`, { headers, json: answer.body });
      const issued = token.json as { token?: string; path?: string } | undefined;
      if (token.status !== 200 || !issued?.token || !issued.path) {
        refuse('token', token.status);
        continue;
      }
      const bought = await http.post(`/api/seckill/do/${issued.path}`, { headers, json: { goodsId, token: issued.token } });
      const requestId = (bought.json as { requestId?: string } | undefined)?.requestId;
      if (bought.status !== 202 || !requestId) {
        refuse('purchase', bought.status);
        continue;
      }
      accepted++;
      const acceptedAt = Date.now();
      let sentAt = acceptedAt;
      for (let poll = 0; poll < MAX_RESULT_POLLS; poll++) {
        if (poll > 0) {
          await sleep(resultPollPause(poll - 1, Date.now() - sentAt));
        }
        resultPolls++;
        sentAt = Date.now();
        const answer = await http.get(resultReadPath(requestId), { headers, timeoutMs: heldReadTimeoutMs() });
        const status = (answer.json as { status?: string } | undefined)?.status;
        if (answer.status === 200 && (status === 'SUCCESS' || status === 'FAIL')) {
          finalMs.push(Date.now() - acceptedAt);
          break;
        }
        if (answer.status !== 200) {
          refuse('result', answer.status);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const ranked = percentiles(finalMs);
  return {
    shoppers: users.length,
    accepted,
    refused,
    resultPolls,
    final: finalMs.length,
    finalMs: { p50Ms: ranked.p50Ms, p90Ms: ranked.p90Ms },
  };
}

/** Source files of the bundle by line: esbuild starts each module with a `// path` comment. */
export async function bundleModules(scriptPath: string): Promise<(line: number) => string | undefined> {
  const lines = (await readFile(scriptPath, 'utf8')).split('\n');
  const starts: { line: number; file: string }[] = [];
  lines.forEach((text, i) => {
    const m = /^\/\/ (\S+\.[cm]?[jt]s)$/.exec(text);
    if (m?.[1]) {
      starts.push({ line: i, file: m[1] });
    }
  });
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found: string | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = starts[mid];
      if (s && s.line <= line) {
        found = s.file;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  };
}

/** The object class whose folder a source file sits in (the waiting room's hub apart from its shards). */
export function classOfFile(file: string | undefined): string | undefined {
  const m = /^durable-objects\/([a-z-]+)\/(.+)$/.exec(file ?? '');
  if (!m) {
    return undefined;
  }
  const names: Record<string, string> = {
    'goods-stock': 'GoodsStock',
    'edge-guard': 'EdgeGuard',
    'limits-store': 'LimitsStore',
    'admission-gate': 'AdmissionGate',
    metrics: 'Metrics',
    'waiting-room': /^hub/.test(m[2] ?? '') ? 'WaitingRoom hub' : 'WaitingRoom',
  };
  return names[m[1] ?? ''];
}

/**
 * CPU milliseconds by object class: each sample whose stack holds a frame of an object's
 * folder counts for that class (the innermost such frame decides), so code of the kernel or
 * a library that the object calls synchronously counts for the object too.
 */
export function cpuByClass(profile: CpuProfile, moduleOf: (line: number) => string | undefined): Record<string, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    for (const c of n.children ?? []) {
      parent.set(c, n.id);
    }
  }
  const classOfNode = new Map<number, string | undefined>();
  const resolve = (id: number): string | undefined => {
    if (classOfNode.has(id)) {
      return classOfNode.get(id);
    }
    const node = byId.get(id);
    let cls: string | undefined;
    if (node) {
      cls = node.callFrame.url.endsWith('.js') ? classOfFile(moduleOf(node.callFrame.lineNumber)) : undefined;
      const up = parent.get(id);
      cls ??= up === undefined ? undefined : resolve(up);
    }
    classOfNode.set(id, cls);
    return cls;
  };
  const us: Record<string, number> = {};
  profile.samples.forEach((id, i) => {
    const cls = resolve(id);
    if (cls) {
      us[cls] = (us[cls] ?? 0) + (profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0);
    }
  });
  return Object.fromEntries(Object.entries(us).map(([k, v]) => [k, round(v / 1000, 1)]));
}
