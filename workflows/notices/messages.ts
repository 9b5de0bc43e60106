/** What starts a notice's delivery: its workflow's id (one per notice: a repeated announce finds it) and type name. */
import type { Notice, NoticeTargets } from '../../src/domain/notices';

export interface NoticeOutcome {
  delivered: number;
  dropped: number;
}

export type NoticeWorkflow = (notice: Notice, targets: NoticeTargets) => Promise<NoticeOutcome>;
export const noticeWorkflowType = 'noticeWorkflow';
export const noticeWorkflowId = (noticeId: string) => `notice-${noticeId}`;
