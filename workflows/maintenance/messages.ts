/** What the API and the worker know of a maintenance window's workflow: its input, id, type name and signal. */
import { defineSignal } from '@temporalio/workflow';

export interface MaintenanceWindowInput {
  windowId: string;
  hostId: string;
  /** The window as booked (the row in host_maintenance is the truth: a withdrawn window ends early). */
  startMs: number;
  endMs: number;
}

export const maintenanceWindowWorkflowType = 'maintenanceWindowWorkflow';
export const maintenanceWindowWorkflowId = (windowId: string) => `maintenance-${windowId}`;

/** The window was withdrawn (deleted before its start, or cut at now): end it now. */
export const windowWithdrawn = defineSignal('windowWithdrawn');
