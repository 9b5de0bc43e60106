/**
 * A canvas timeline: rows down, time across, a time axis on top, a "now" line. Only the visible rows
 * are painted (1,000 rows cost what 30 do); what a row shows is the caller's `paintRow`. Pointer
 * drag pans (mouse and touch alike), the wheel scrolls rows (with Shift, or sideways, time), and the
 * keyboard does both when the canvas has focus.
 */
import { tickLabel, ticks } from './time';

export interface Row {
  key: string;
  label: string;
  /** A group's header row: a label across, no bars. */
  header?: boolean;
}

export interface RowGeometry {
  top: number;
  height: number;
  left: number;
  right: number;
  x(ms: number): number;
}

export interface TimelineHandlers<R extends Row> {
  paintRow(ctx: CanvasRenderingContext2D, row: R, g: RowGeometry, viewStart: number, viewEnd: number): void;
  /** A click (not a drag) on a row at an instant. */
  onPick?(row: R, atMs: number): void;
  /** The view moved in time (by drag, wheel or keys): the caller owns the view and redraws. */
  onPan(deltaMs: number): void;
  onZoom?(direction: 1 | -1): void;
  /** What is under the pointer, for the status line (undefined: nothing). */
  describe?(row: R, atMs: number): string | undefined;
  onDescribe?(text: string): void;
}

export const AXIS_HEIGHT = 38;
export const ROW_HEIGHT = 24;
export const LABEL_WIDTH = 190;

const COLORS = {
  background: '#ffffff',
  stripe: '#f5f7fa',
  grid: '#e3e7ed',
  gridMajor: '#c8cfd8',
  axisText: '#37414d',
  label: '#1d2733',
  header: '#e9eef5',
  now: '#d22e2e',
};

export class Timeline<R extends Row> {
  rows: R[] = [];
  viewStart = 0;
  viewEnd = 1;
  nowMs = Date.now();
  /** Vertical scroll, in pixels of rows. */
  scrollTop = 0;
  private frame = 0;
  private width = 0;
  private height = 0;
  private drag?: { x: number; y: number; startX: number; startY: number; moved: boolean; pointerId: number };
  private readonly resizeObserver: ResizeObserver;

  constructor(
    readonly canvas: HTMLCanvasElement,
    private readonly handlers: TimelineHandlers<R>,
    readonly rowHeight = ROW_HEIGHT,
    private readonly maxHeight = () => Math.max(240, Math.round(window.innerHeight * 0.62)),
  ) {
    canvas.style.touchAction = 'none';
    canvas.addEventListener('pointerdown', this.pointerDown);
    canvas.addEventListener('pointermove', this.pointerMove);
    canvas.addEventListener('pointerup', this.pointerUp);
    canvas.addEventListener('pointercancel', () => (this.drag = undefined));
    canvas.addEventListener('wheel', this.wheel, { passive: false });
    canvas.addEventListener('keydown', this.keyDown);
    this.resizeObserver = new ResizeObserver(() => this.requestDraw());
    this.resizeObserver.observe(canvas.parentElement ?? canvas);
  }

  destroy(): void {
    this.resizeObserver.disconnect();
    cancelAnimationFrame(this.frame);
  }

  /** Draws on the next animation frame (many changes in one frame draw once). */
  requestDraw(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  x(ms: number): number {
    return LABEL_WIDTH + ((ms - this.viewStart) / (this.viewEnd - this.viewStart)) * (this.width - LABEL_WIDTH);
  }

  timeAt(px: number): number {
    return this.viewStart + ((px - LABEL_WIDTH) / (this.width - LABEL_WIDTH)) * (this.viewEnd - this.viewStart);
  }

  private contentHeight(): number {
    return this.rows.length * this.rowHeight;
  }

  private clampScroll(): void {
    const visible = this.height - AXIS_HEIGHT;
    this.scrollTop = Math.max(0, Math.min(this.scrollTop, Math.max(0, this.contentHeight() - visible)));
  }

  /** Scrolls so that the row is visible. */
  reveal(index: number): void {
    const top = index * this.rowHeight;
    const visible = this.height - AXIS_HEIGHT;
    if (top < this.scrollTop) this.scrollTop = top;
    else if (top + this.rowHeight > this.scrollTop + visible) this.scrollTop = top + this.rowHeight - visible;
    this.requestDraw();
  }

  draw(): void {
    const parent = this.canvas.parentElement;
    const cssWidth = Math.max(320, Math.floor(parent?.clientWidth ?? 800));
    const cssHeight = Math.min(this.maxHeight(), AXIS_HEIGHT + Math.max(this.contentHeight(), this.rowHeight * 2));
    const ratio = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(cssWidth * ratio) || this.canvas.height !== Math.round(cssHeight * ratio)) {
      this.canvas.width = Math.round(cssWidth * ratio);
      this.canvas.height = Math.round(cssHeight * ratio);
      this.canvas.style.width = `${cssWidth}px`;
      this.canvas.style.height = `${cssHeight}px`;
    }
    this.width = cssWidth;
    this.height = cssHeight;
    this.clampScroll();
    const ctx = this.canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.fillStyle = COLORS.background;
    ctx.fillRect(0, 0, cssWidth, cssHeight);
    ctx.font = '12px system-ui, sans-serif';
    ctx.textBaseline = 'middle';

    const axis = ticks(this.viewStart, this.viewEnd, cssWidth - LABEL_WIDTH);
    const first = Math.floor(this.scrollTop / this.rowHeight);
    const last = Math.min(this.rows.length - 1, Math.ceil((this.scrollTop + cssHeight - AXIS_HEIGHT) / this.rowHeight));

    // Rows, clipped below the axis.
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, AXIS_HEIGHT, cssWidth, cssHeight - AXIS_HEIGHT);
    ctx.clip();
    for (let i = first; i <= last; i++) {
      const top = AXIS_HEIGHT + i * this.rowHeight - this.scrollTop;
      const row = this.rows[i];
      ctx.fillStyle = row.header ? COLORS.header : i % 2 ? COLORS.stripe : COLORS.background;
      ctx.fillRect(0, top, cssWidth, this.rowHeight);
    }
    // Grid under the bars.
    ctx.strokeStyle = COLORS.grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const t of axis.minor) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, AXIS_HEIGHT);
      ctx.lineTo(x, cssHeight);
    }
    ctx.stroke();
    ctx.strokeStyle = COLORS.gridMajor;
    ctx.beginPath();
    for (const t of axis.major) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, AXIS_HEIGHT);
      ctx.lineTo(x, cssHeight);
    }
    ctx.stroke();
    // Bars, clipped to the time area.
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_WIDTH, AXIS_HEIGHT, cssWidth - LABEL_WIDTH, cssHeight - AXIS_HEIGHT);
    ctx.clip();
    const geometry = (top: number): RowGeometry => ({ top, height: this.rowHeight, left: LABEL_WIDTH, right: cssWidth, x: (ms) => this.x(ms) });
    for (let i = first; i <= last; i++) {
      const row = this.rows[i];
      if (!row.header) this.handlers.paintRow(ctx, row, geometry(AXIS_HEIGHT + i * this.rowHeight - this.scrollTop), this.viewStart, this.viewEnd);
    }
    ctx.restore();
    // Labels.
    ctx.fillStyle = COLORS.label;
    for (let i = first; i <= last; i++) {
      const row = this.rows[i];
      const top = AXIS_HEIGHT + i * this.rowHeight - this.scrollTop;
      ctx.font = row.header ? 'bold 12px system-ui, sans-serif' : '12px system-ui, sans-serif';
      ctx.fillText(fit(ctx, row.label, (row.header ? cssWidth : LABEL_WIDTH) - 16), 8, top + this.rowHeight / 2);
    }
    ctx.restore();

    // Axis.
    ctx.fillStyle = COLORS.background;
    ctx.fillRect(0, 0, cssWidth, AXIS_HEIGHT);
    ctx.strokeStyle = COLORS.gridMajor;
    ctx.beginPath();
    ctx.moveTo(0, AXIS_HEIGHT - 0.5);
    ctx.lineTo(cssWidth, AXIS_HEIGHT - 0.5);
    ctx.moveTo(LABEL_WIDTH - 0.5, 0);
    ctx.lineTo(LABEL_WIDTH - 0.5, cssHeight);
    ctx.stroke();
    ctx.fillStyle = COLORS.axisText;
    ctx.font = '12px system-ui, sans-serif';
    for (const t of axis.major) {
      const x = this.x(t);
      if (x >= LABEL_WIDTH) ctx.fillText(tickLabel(t, axis.step), x + 4, AXIS_HEIGHT / 2);
    }
    ctx.fillText('UTC', 8, AXIS_HEIGHT / 2);

    // Now.
    if (this.nowMs > this.viewStart && this.nowMs < this.viewEnd) {
      const x = Math.round(this.x(this.nowMs)) + 0.5;
      ctx.strokeStyle = COLORS.now;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(x, AXIS_HEIGHT - 6);
      ctx.lineTo(x, cssHeight);
      ctx.stroke();
      ctx.lineWidth = 1;
    }
  }

  private rowAt(offsetY: number): R | undefined {
    if (offsetY < AXIS_HEIGHT) return undefined;
    return this.rows[Math.floor((offsetY - AXIS_HEIGHT + this.scrollTop) / this.rowHeight)];
  }

  private readonly pointerDown = (event: PointerEvent) => {
    this.canvas.setPointerCapture(event.pointerId);
    this.drag = { x: event.offsetX, y: event.offsetY, startX: event.offsetX, startY: event.offsetY, moved: false, pointerId: event.pointerId };
  };

  private readonly pointerMove = (event: PointerEvent) => {
    const drag = this.drag;
    if (drag && drag.pointerId === event.pointerId) {
      const dx = event.offsetX - drag.x;
      const dy = event.offsetY - drag.y;
      if (Math.abs(event.offsetX - drag.startX) + Math.abs(event.offsetY - drag.startY) > 4) drag.moved = true;
      drag.x = event.offsetX;
      drag.y = event.offsetY;
      if (drag.moved) {
        if (dx !== 0) this.handlers.onPan((-dx / (this.width - LABEL_WIDTH)) * (this.viewEnd - this.viewStart));
        if (dy !== 0) {
          this.scrollTop -= dy;
          this.requestDraw();
        }
      }
      return;
    }
    const row = this.rowAt(event.offsetY);
    if (this.handlers.describe && this.handlers.onDescribe && row && !row.header && event.offsetX > LABEL_WIDTH) {
      this.handlers.onDescribe(this.handlers.describe(row, this.timeAt(event.offsetX)) ?? '');
    }
  };

  private readonly pointerUp = (event: PointerEvent) => {
    const drag = this.drag;
    this.drag = undefined;
    if (!drag || drag.moved || event.offsetX < LABEL_WIDTH) return;
    const row = this.rowAt(event.offsetY);
    if (row && !row.header) this.handlers.onPick?.(row, this.timeAt(event.offsetX));
  };

  private readonly wheel = (event: WheelEvent) => {
    event.preventDefault();
    const sideways = event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY);
    if (event.ctrlKey) {
      this.handlers.onZoom?.(event.deltaY > 0 ? 1 : -1);
    } else if (sideways) {
      const delta = event.shiftKey ? event.deltaY || event.deltaX : event.deltaX;
      this.handlers.onPan((delta / (this.width - LABEL_WIDTH)) * (this.viewEnd - this.viewStart));
    } else {
      this.scrollTop += event.deltaMode === 1 ? event.deltaY * this.rowHeight : event.deltaY;
      this.requestDraw();
    }
  };

  private readonly keyDown = (event: KeyboardEvent) => {
    const span = this.viewEnd - this.viewStart;
    const visible = this.height - AXIS_HEIGHT;
    const actions: Record<string, () => void> = {
      ArrowLeft: () => this.handlers.onPan(-span / 8),
      ArrowRight: () => this.handlers.onPan(span / 8),
      ArrowUp: () => (this.scrollTop -= this.rowHeight),
      ArrowDown: () => (this.scrollTop += this.rowHeight),
      PageUp: () => (this.scrollTop -= visible),
      PageDown: () => (this.scrollTop += visible),
      Home: () => (this.scrollTop = 0),
      End: () => (this.scrollTop = this.contentHeight()),
      '+': () => this.handlers.onZoom?.(-1),
      '=': () => this.handlers.onZoom?.(-1),
      '-': () => this.handlers.onZoom?.(1),
    };
    const action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    action();
    this.requestDraw();
  };
}

/** The text, cut with an ellipsis to fit `width` pixels. */
export function fit(ctx: CanvasRenderingContext2D, text: string, width: number): string {
  if (width <= 0) return '';
  if (ctx.measureText(text).width <= width) return text;
  let low = 0;
  let high = text.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= width) low = mid;
    else high = mid - 1;
  }
  return low === 0 ? '' : `${text.slice(0, low)}…`;
}
