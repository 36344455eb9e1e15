// Charts drawn as plain SVG (no library, nothing inline that the page's CSP forbids: every
// colour is a class of style.css, every size an SVG attribute).
import { html } from "/ui/assets/htm-preact-standalone.module.js";

const WIDTH = 600;
const HEIGHT = 160;
const LEFT = 40;
const BOTTOM = 20;
const TOP = 8;

/** The plot's height for ``value`` of ``most`` (the plot's top). */
function scaled(value, most) {
  return most > 0 ? ((HEIGHT - TOP - BOTTOM) * value) / most : 0;
}

/** A chart's frame: its title and description name it for assistive technology, the axis
 * labels say the top value and the window's ends. */
function Frame({ id, title, summary, top, from, to, children }) {
  return html`<figure class="chart" id=${id}>
    <svg
      viewBox=${`0 0 ${WIDTH} ${HEIGHT}`}
      role="img"
      aria-labelledby=${`${id}-title ${id}-desc`}
      preserveAspectRatio="none"
    >
      <title id=${`${id}-title`}>${title}</title>
      <desc id=${`${id}-desc`}>${summary}</desc>
      <line class="axis" x1=${LEFT} y1=${TOP} x2=${LEFT} y2=${HEIGHT - BOTTOM} />
      <line class="axis" x1=${LEFT} y1=${HEIGHT - BOTTOM} x2=${WIDTH} y2=${HEIGHT - BOTTOM} />
      <text class="tick" x=${LEFT - 4} y=${TOP + 8} text-anchor="end">${top}</text>
      <text class="tick" x=${LEFT - 4} y=${HEIGHT - BOTTOM} text-anchor="end">0</text>
      <text class="tick" x=${LEFT} y=${HEIGHT - 4}>${from}</text>
      <text class="tick" x=${WIDTH} y=${HEIGHT - 4} text-anchor="end">${to}</text>
      ${children}
    </svg>
    <figcaption>${summary}</figcaption>
  </figure>`;
}

/** Stacked bars, one per bucket: ``series`` ([name, label]) bottom to top, each bar a
 * ``rect.bar-<name>`` carrying its bucket's start and value. */
export function BarChart({ id, title, summary, buckets, series, from, to }) {
  const most = Math.max(0, ...buckets.map((b) => series.reduce((sum, [name]) => sum + b[name], 0)));
  const step = (WIDTH - LEFT) / Math.max(1, buckets.length);
  const bars = buckets.flatMap((b, index) => {
    let base = HEIGHT - BOTTOM;
    return series
      .filter(([name]) => b[name] > 0)
      .map(([name, label]) => {
        const height = scaled(b[name], most);
        base -= height;
        return html`<rect
          class=${`bar bar-${name}`}
          x=${LEFT + index * step + step * 0.1}
          y=${base}
          width=${step * 0.8}
          height=${height}
          data-series=${name}
          data-bucket=${b.start}
          data-value=${b[name]}
          ><title>${`${b[name]} ${label}`}</title></rect
        >`;
      });
  });
  return html`<${Frame} id=${id} title=${title} summary=${summary} top=${most} from=${from} to=${to}
    >${bars}<//
  >`;
}

/** A line through each bucket's ``rate`` (0 to 1; buckets with none are skipped), a point
 * ``circle.point`` per bucket that has one. */
export function RateChart({ id, title, summary, buckets, from, to }) {
  const step = (WIDTH - LEFT) / Math.max(1, buckets.length);
  const points = buckets
    .map((b, index) => ({ b, x: LEFT + index * step + step / 2 }))
    .filter(({ b }) => b.rate !== null)
    .map(({ b, x }) => ({ b, x, y: HEIGHT - BOTTOM - scaled(b.rate, 1) }));
  return html`<${Frame} id=${id} title=${title} summary=${summary} top="100%" from=${from} to=${to}>
    ${points.length > 1 &&
    html`<polyline class="rate-line" points=${points.map((p) => `${p.x},${p.y}`).join(" ")} />`}
    ${points.map(
      ({ b, x, y }) => html`<circle
        class="point"
        cx=${x}
        cy=${y}
        r="4"
        data-bucket=${b.start}
        data-rate=${b.rate}
        ><title>${percent(b.rate)}</title></circle
      >`,
    )}
  <//>`;
}

/** ``rate`` (0 to 1) as a whole percentage. */
export function percent(rate) {
  return `${Math.round(rate * 100)}%`;
}
