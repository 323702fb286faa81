import { desc, inArray } from 'drizzle-orm';
import type { Db } from './client';
import { reconciliationReport } from './schema';

export type NewReconciliationReport = typeof reconciliationReport.$inferInsert;

/** Records one goods' result of a reconciliation run. */
export async function insertReconciliationReport(db: Db, row: NewReconciliationReport): Promise<void> {
  await db.insert(reconciliationReport).values(row);
}

/** The latest reconciliation of each of these goods. */
export function lastReconciliations(db: Db, goodsIds: number[]) {
  if (goodsIds.length === 0) {
    return Promise.resolve([]);
  }
  return db
    .selectDistinctOn([reconciliationReport.goodsId], {
      goodsId: reconciliationReport.goodsId,
      runAt: reconciliationReport.runAt,
      consistent: reconciliationReport.consistent,
      discrepancies: reconciliationReport.discrepancies,
    })
    .from(reconciliationReport)
    .where(inArray(reconciliationReport.goodsId, goodsIds))
    .orderBy(reconciliationReport.goodsId, desc(reconciliationReport.runAt));
}
