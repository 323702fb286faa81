import type { ResultView } from '../kernel/contract';

// A purchase's final answer, SUCCESS with its order or FAIL with its reason, never changes
// (a released order keeps SUCCESS; its order's own status tells the rest). An isolate keeps
// the final answers it read, so the polls that follow one (the page, a reload, a second tab)
// reach neither the mirror nor the goods' object, which would otherwise take one call per
// poll when the mirror is off. QUEUED is never kept: it is the answer that changes.

/** Well inside the 24 h the object remembers a keyed rejection (a key reused after that may be accepted). */
const FINAL_TTL_MS = 10 * 60_000;
/** Answers one isolate keeps at most; the oldest go first. */
const MAX_FINAL = 10_000;

const finals = new Map<string, { view: ResultView; until: number }>();

/** The final answer this isolate read for `requestId` lately, if any. */
export function knownResult(requestId: string, now = Date.now()): ResultView | undefined {
  const known = finals.get(requestId);
  if (!known) {
    return undefined;
  }
  if (now >= known.until) {
    finals.delete(requestId);
    return undefined;
  }
  return known.view;
}

/** Keeps `view` when it is final. */
export function rememberResult(view: ResultView, now = Date.now()): void {
  if (view.status === 'QUEUED' || finals.has(view.requestId)) {
    return;
  }
  if (finals.size >= MAX_FINAL) {
    // A Map iterates in insertion order: the first key is the oldest answer.
    const oldest = finals.keys().next().value;
    if (oldest !== undefined) {
      finals.delete(oldest);
    }
  }
  finals.set(view.requestId, { view, until: now + FINAL_TTL_MS });
}

/** Forgets every kept answer (tests). */
export function clearResults(): void {
  finals.clear();
}
