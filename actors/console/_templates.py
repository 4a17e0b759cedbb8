# ruff: noqa: E501, RUF001  # templates: HTML lines are as long as their markup; typographic signs
"""The console's pages: Jinja templates with autoescape on, so every value is escaped.

Nothing here marks a value safe but the server's own fragments (the tree, the SVG
charts), which are rendered by these same templates first, and the trace's bars, which
``_trace_view.svg_rows`` writes with an explicit escape of every text. Model answers, tool results,
prompts, ids: all are untrusted and reach the page only through ``{{ ... }}``.
"""

from __future__ import annotations

import jinja2
from markupsafe import Markup

from ._static import STATIC_VERSION

__all__ = ["fragment", "render"]

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf" content="{{ csrf }}">
<title>{{ title }} · powertrio</title>
<link rel="stylesheet" href="{{ root }}/static/console.css?v={{ static_version }}">
<script src="{{ root }}/static/console.js?v={{ static_version }}" defer></script>
</head><body>
<header><a class="brand" href="{{ root }}/">powertrio</a>
<nav><a href="{{ root }}/">fleet</a> <a href="{{ root }}/usage">usage</a></nav>
<span class="where">{{ where }}</span></header>
<main>
{% if flash %}<p class="flash {{ flash_kind }}">{{ flash }}</p>{% endif %}
{% block body %}{% endblock %}
</main></body></html>
"""

_FLEET = """{% extends "base" %}{% block body %}
<h1>Fleet <span id="live" class="dim" data-feed="{{ root }}/changes">(live)</span></h1>
<div id="fleet-live" data-live>
<p class="dim">{{ rows|length }} sessions · {{ events }} events folded · today (UTC) {{ today }}
{% if fleet_note %} · {{ fleet_note }}{% endif %}</p>
{% if nodes %}<h2>Nodes</h2>
<table id="nodes"><tr><th>node</th><th>state</th><th>pid</th><th>powertrio</th><th>started (UTC)</th></tr>
{% for n in nodes %}<tr data-node="{{ n.name }}"><td>{{ n.name }}</td><td><span class="status {{ n.state }}">{{ n.state }}</span>{% if n.state == "lost" %} <span class="dim">its lease lapsed and it recorded no stop (killed?)</span>{% endif %}</td>
<td>{{ n.pid }}</td><td>{{ n.version }}</td><td>{{ n.started_at }}</td></tr>{% endfor %}
</table>{% endif %}
{% if agents %}<h2>Agents of the fleet file</h2>
<table id="agents"><tr><th>agent</th>{% for c in agent_columns %}<th>{{ c }}</th>{% endfor %}<th>latest runs</th></tr>
{% for a in agents %}<tr data-agent="{{ a.name }}"><td>{% if a.session %}<a href="{{ root }}/sessions/{{ a.session|urlencode }}">{{ a.name }}</a>{% else %}{{ a.name }}{% endif %}</td>
{% for c in agent_columns %}<td>{% if c == "state" %}<span class="status {{ a.get(c, "") }}">{{ a.get(c, "") }}</span>{% else %}{{ a.get(c, "") }}{% endif %}</td>{% endfor %}<td class="strip">{{ strips.get(a.name, "") }}</td></tr>{% endfor %}
</table><h2>Sessions of the log</h2>{% endif %}
{% if errors %}<h2>Errors by code</h2><table class="small"><tr><th>code</th><th>runs</th></tr>
{% for code, n in errors %}<tr><td><code>{{ code }}</code></td><td>{{ n }}</td></tr>{% endfor %}
</table>{% endif %}
<table id="fleet"><tr><th>agent</th><th>status</th>
<th>runs</th><th>rounds</th><th>tokens</th><th>today</th><th>last run</th><th>next wake-up</th><th>updated</th><th>errors</th></tr>
{% for r in rows %}<tr class="depth{{ r.depth }}">
<td><a href="{{ root }}/sessions/{{ r.root|urlencode }}{% if r.sub %}#node-{{ r.id }}{% endif %}">{{ r.id }}</a></td>
<td><span class="status {{ r.status }}">{{ r.status_text }}</span></td>
<td>{{ r.runs }}</td><td>{{ r.rounds }}</td><td>{{ "{:,}".format(r.tokens) }}</td>
<td>{{ "{:,}".format(r.today) }}</td><td>{{ r.last_run or "" }}</td><td>{{ r.wake_up }}</td><td>{{ r.updated }}</td>
<td>{% for code, n in r.errors %}<code>{{ code }}</code>×{{ n }} {% endfor %}</td></tr>
{% else %}<tr><td colspan="11">no sessions in this log yet</td></tr>{% endfor %}
</table></div>{% endblock %}
"""

_TREE = """<ul class="tree">{% for node in nodes recursive %}
<li id="node-{{ node.session_id }}" data-status="{{ node.status }}">
<span class="status {{ node.status }}">{{ node.status.replace("_", " ") }}</span>
<b>{{ node.name }}</b> <code>{{ node.session_id }}</code>
<span class="dim">rounds <span class="rounds">{{ node.rounds }}</span> ·
<span class="tokens">{{ "{:,}".format(node.tokens) }}</span> tok</span>
{% if node.tools %}<span class="tools">⚙ {{ node.tools|join(", ") }}</span>{% endif %}
{% if node.task %}<div class="dim">task: {{ node.task|truncate(120) }}</div>{% endif %}
{% if node.children %}<ul>{{ loop(node.children) }}</ul>{% endif %}
</li>{% endfor %}</ul>
<p class="dim" id="tree-total">{{ count }} agents · {{ "{:,}".format(total) }} tokens in all</p>
"""

_SESSION = """{% extends "base" %}{% block body %}
<h1>Session <code>{{ sid }}</code></h1>
<p class="dim"><span id="version" data-live>{{ version }} events</span> · <a href="{{ root }}/sessions/{{ sid|urlencode }}/log">log</a> ·
<a href="{{ root }}/sessions/{{ sid|urlencode }}/trace">trace of the latest run</a> ·
<a href="{{ root }}/sessions/{{ sid|urlencode }}/replay">replay against this code</a></p>
<section><h2>Agent tree <span id="live" class="dim" data-feed="{{ root }}/sessions/{{ sid|urlencode }}/stream">(live)</span></h2>
<div id="tree">{{ tree_html }}</div></section>
<div id="requests-box">{{ requests_html }}</div>
{% if writable %}<section><h2>Follow up</h2>
<form method="post" action="{{ root }}/sessions/{{ sid|urlencode }}/follow-up">
<input type="hidden" name="csrf" value="{{ csrf }}"><input name="text" placeholder="one more thing…" required size="60">
<button>Send</button></form>
<div id="cancel-box" data-live>{% if open_run %}<form method="post" action="{{ root }}/sessions/{{ sid|urlencode }}/cancel">
<input type="hidden" name="csrf" value="{{ csrf }}"><button class="danger">Cancel the open run</button></form>{% endif %}</div>
</section>{% endif %}
<section id="runs-box" data-live><h2>Runs</h2><table id="runs"><tr><th>run</th><th>status</th><th>versions</th><th>input</th><th></th></tr>
{% for r in runs %}<tr><td><a href="{{ root }}/sessions/{{ sid|urlencode }}/log?run={{ r.run_id|urlencode }}">{{ r.run_id }}</a></td>
<td><span class="status {{ r.status }}">{{ r.status }}</span></td><td>{{ r.first }}–{{ r.last or "" }}</td>
<td>{{ r.text|truncate(100) }}</td><td><a class="trace-link" href="{{ root }}/sessions/{{ sid|urlencode }}/trace?run={{ r.run_id|urlencode }}">trace</a></td></tr>{% endfor %}</table></section>
<section id="transcript-box" data-live><h2>Transcript</h2>{% if omitted %}<p class="dim">{{ omitted }} earlier entries: see the <a href="{{ root }}/sessions/{{ sid|urlencode }}/log">log</a></p>{% endif %}
<ol class="transcript">{% for e in entries %}<li class="{{ e.kind }}"><span class="dim">v{{ e.version }}</span>
<b>{{ e.kind.replace("_", " ") }}</b>{% if e.name %} {{ e.name }}{% endif %}{% if e.status %} [{{ e.status }}]{% endif %}
{% if e.text %}<div class="text">{{ e.text }}</div>{% endif %}
{% for c in e.tool_calls or [] %}<div class="call">→ {{ c.name }}({{ c.arguments }})</div>{% endfor %}
{% if writable %}<form class="fork" method="post" action="{{ root }}/sessions/{{ sid|urlencode }}/fork">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="at" value="{{ e.version }}">
<button title="a new session with the events up to here">fork here</button></form>{% endif %}
</li>{% endfor %}</ol></section>
{% endblock %}
"""

_REQUESTS = """{% if requests %}<section id="requests"><h2>Waiting for a human</h2>
{% for q in requests %}<div class="request">
<p><b>{{ q.kind }}</b> <code>{{ q.request_id }}</code> from <code>{{ q.session_id }}</code>: <span class="prompt">{{ q.prompt }}</span></p>
{% if writable %}<form method="post" action="{{ root }}/sessions/{{ q.session_id|urlencode }}/answer">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="request" value="{{ q.request_id }}">
<input type="hidden" name="back" value="{{ sid }}">
{% if q.kind == "question" %}<input name="answer" placeholder="your answer" required>
<button name="verdict" value="reply">Reply</button>
{% else %}<input name="answer" placeholder="reason (for a denial)">
<button name="verdict" value="approve">Approve</button> <button name="verdict" value="deny">Deny</button>{% endif %}
</form>{% endif %}</div>{% endfor %}</section>{% endif %}
"""

_LOG = """{% extends "base" %}{% block body %}
<h1>Log of <a href="{{ root }}/sessions/{{ sid|urlencode }}"><code>{{ sid }}</code></a>
{% if live_log %}<span id="live" class="dim" data-feed="{{ root }}/changes">(live)</span>{% endif %}</h1>
<form method="get" class="filters">kind <select name="kind"><option value="">all</option>
{% for k in kinds %}<option value="{{ k }}"{% if k == kind %} selected{% endif %}>{{ k }}</option>{% endfor %}</select>
run <input name="run" value="{{ run }}" size="16"> <button>filter</button>
<a href="?">clear</a></form>
<div id="log-live"{% if live_log %} data-live{% endif %}>
<p class="dim">{{ page.version }} events in the stream{% if span %} · run {{ span.run_id }}: versions {{ span.first }}–{{ span.last or "open" }}{% endif %}
· {{ page.records|length }} shown, {{ page.scanned }} read</p>
<table id="log"><tr><th>version</th><th>position</th><th>at</th><th>type</th><th>data</th><th></th></tr>
{% for r in rows %}<tr><td>{{ r.version }}</td><td>{{ r.position }}</td><td>{{ r.at }}</td><td><code>{{ r.type }}</code></td>
<td class="data">{{ r.data }}</td><td><a href="{{ root }}/sessions/{{ sid|urlencode }}/state?at={{ r.version }}">state here</a></td></tr>
{% else %}<tr><td colspan="6">no events{% if kind or run %} match{% endif %}</td></tr>{% endfor %}</table>
<p>{% if newer %}<a href="?{{ newer }}">← newer</a>{% endif %}
{% if older %} <a id="older" href="?{{ older }}">older →</a>{% endif %}</p></div>
{% endblock %}
"""

_STATE = """{% extends "base" %}{% block body %}
<h1>State of <a href="{{ root }}/sessions/{{ sid|urlencode }}"><code>{{ sid }}</code></a> at version {{ at }}</h1>
<p><a href="?at={{ at - 1 }}">← v{{ at - 1 }}</a> · <a href="?at={{ at + 1 }}">v{{ at + 1 }} →</a></p>
{% if writable %}<form method="post" action="{{ root }}/sessions/{{ sid|urlencode }}/fork">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="at" value="{{ at }}">
<input name="as" placeholder="new id (optional)"> <button>Fork a new session from version {{ at }}</button></form>{% endif %}
<table class="small">{% for k, v in facts %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table>
<h2>Transcript as of v{{ at }} ({{ messages|length }} messages)</h2>
<ol class="transcript">{% for m in messages %}<li><b>{{ m.role }}</b><div class="text">{{ m.text }}</div></li>{% endfor %}</ol>
{% endblock %}
"""

_REPLAY = """{% extends "base" %}{% block body %}
<h1>Replay of <a href="{{ root }}/sessions/{{ sid|urlencode }}"><code>{{ sid }}</code></a>{% if from_version %} from version {{ from_version }}{% endif %}</h1>
<p class="dim">{% if from_version %}The log up to version {{ from_version }} is taken as recorded
(<a href="{{ root }}/sessions/{{ sid|urlencode }}/state?at={{ from_version }}">the state there</a>;
<a id="replay-whole" href="{{ root }}/sessions/{{ sid|urlencode }}/replay">replay from the start</a>); every
model answer recorded after it{% else %}Every recorded model answer{% endif %} is asked for again by this code, with the tool set
recorded with each request; no model or tool is called.</p>
{% if divergence %}<p class="status failed">diverges</p>
<table class="small"><tr><th>stream</th><td><code>{{ divergence.stream }}</code></td></tr>
<tr><th>version</th><td>{{ divergence.version }} (<code>{{ divergence.event_type }}</code>)
<a href="{{ root }}/sessions/{{ sid|urlencode }}/state?at={{ divergence.version }}">state there</a></td></tr></table>
<table class="side-by-side" id="replay-diff"><tr><th>recorded in the log</th><th>asked for by this code</th></tr>
{% for row in rows %}<tr class="{{ row.kind }}">{% if row.kind == "note" %}<td colspan="2">{{ row.recorded }}</td>{% else %}<td class="old">{{ row.recorded }}</td><td class="new">{{ row.replayed }}</td>{% endif %}</tr>
{% endfor %}</table>
<details><summary>as a unified diff</summary><pre class="diff">{% for line in diff %}<span class="{{ line.cls }}">{{ line.text }}</span>
{% endfor %}</pre></details>
{% elif error %}<p class="status failed">{{ error }}</p>
{% else %}<p class="status completed">no divergence: {{ checked }} model answers asked for again, identically</p>
<ul>{% for n in nodes %}<li><code>{{ n.session_id }}</code> · {{ n.version }} events · {{ n.checked }} answers checked</li>{% endfor %}</ul>{% endif %}
{% endblock %}
"""

_USAGE = """{% extends "base" %}{% block body %}
<h1>Usage and cost</h1>
<p class="dim">Tokens of every agent's own model calls per UTC day (the fold of
<code>powertrio sessions</code>){% if priced %}; cost at the prices given{% endif %}.</p>
{{ tokens_svg }}
{% if priced %}{{ cost_svg }}{% endif %}
{% for title, svg in group_charts %}<section class="group-chart"><h2>{{ title }}</h2>{{ svg }}</section>{% endfor %}
<table><tr><th>agent</th>{% for d in days %}<th>{{ d }}</th>{% endfor %}<th>total</th></tr>
{% for a in agents %}<tr><td><a href="{{ root }}/sessions/{{ a.root|urlencode }}">{{ a.id }}</a></td>
{% for v in a.counts %}<td>{{ "{:,}".format(v) }}</td>{% endfor %}<td>{{ "{:,}".format(a.total) }}</td></tr>{% endfor %}
</table>{% endblock %}
"""

_CHART = """<figure class="chart"><figcaption>{{ title }}</figcaption>
<svg xmlns="http://www.w3.org/2000/svg" width="{{ width }}" height="{{ height }}" viewBox="0 0 {{ width }} {{ height }}" role="img" aria-label="{{ title }}">
<line x1="{{ left }}" y1="{{ base }}" x2="{{ width - 10 }}" y2="{{ base }}" stroke="#888"/>
<text x="{{ left - 6 }}" y="{{ top + 4 }}" text-anchor="end" font-size="11">{{ top_label }}</text>
<text x="{{ left - 6 }}" y="{{ base }}" text-anchor="end" font-size="11">0</text>
{% for bar in bars %}<rect x="{{ bar.x }}" y="{{ bar.y }}" width="{{ bar.w }}" height="{{ bar.h }}" fill="{{ bar.color }}"><title>{{ bar.label }}</title></rect>
{% endfor %}{% for t in ticks %}<text x="{{ t.x }}" y="{{ base + 14 }}" text-anchor="middle" font-size="11">{{ t.text }}</text>
{% endfor %}</svg>
<ul class="legend">{% for l in legend %}<li><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{{ l.color }}"/></svg> {{ l.text }}</li>{% endfor %}</ul>
</figure>
"""

_TRACE = """{% extends "base" %}{% block body %}
<h1>Trace of <a href="{{ root }}/sessions/{{ sid|urlencode }}"><code>{{ sid }}</code></a>{% if trace.run_id %} · run <code>{{ trace.run_id }}</code>{% endif %}</h1>
<p class="dim">{% if trace.runs|length > 1 %}runs: {% for r in trace.runs|reverse %}{% if loop.index <= 20 %}<a href="?run={{ r|urlencode }}">{{ r }}</a> {% endif %}{% endfor %}·
{% endif %}<a href="{{ root }}/sessions/{{ sid|urlencode }}/log{% if trace.run_id %}?run={{ trace.run_id|urlencode }}{% endif %}">log of this run</a> ·
drawn from the log: the events' record times and their own fields. Select a bar for its event.</p>
<div id="trace" data-refresh="{% if trace.live %}{{ root }}/sessions/{{ sid|urlencode }}/trace?part=chart{% if trace.run_id %}&run={{ trace.run_id|urlencode }}{% endif %}{% endif %}"
 data-event="{{ root }}/sessions/">{{ chart_html }}</div>
<aside id="trace-detail"><p class="dim">Select a bar.</p></aside>
{% endblock %}
"""

_TRACE_CHART = """<p class="dim" id="trace-summary" data-live="{{ 1 if trace.live else 0 }}">{% if not trace.bars %}no run to draw{% else %}
<span class="status {{ trace.status }}">{{ trace.status }}</span> · {{ trace.bars|length }} bars ·
{{ "{:,}".format(trace.usage.prompt_tokens) }} in + {{ "{:,}".format(trace.usage.completion_tokens) }} out tokens{% if trace.cost is not none %} · ${{ "{:,.6f}".format(trace.cost) }}{% endif %}{% if trace.live %} · <span id="trace-live">(live)</span>{% endif %}{% endif %}</p>
<div class="legend">{% for k in ("run", "round", "model", "tool", "child", "human", "timer") %}<span class="key kind-{{ k }}">{{ k }}</span> {% endfor %}</div>
<svg xmlns="http://www.w3.org/2000/svg" class="trace" width="{{ lay.width }}" height="{{ lay.height }}" viewBox="0 0 {{ lay.width }} {{ lay.height }}" role="img" aria-label="trace">
{% for t in lay.ticks %}<line class="tick" x1="{{ t[0] }}" y1="14" x2="{{ t[0] }}" y2="{{ lay.height }}"/><text x="{{ t[0] }}" y="11" text-anchor="middle" font-size="10">+{{ t[1] }}</text>
{% endfor %}{{ rows_svg }}</svg>
"""

_TRACE_EVENT = """<div class="event"><p id="bar-summary" class="dim"></p>
<h3><code>{{ record.type }}</code> · <code>{{ sid }}</code> v{{ record.version }} · {{ at }}</h3>
<p><a id="state-here" href="{{ root }}/sessions/{{ sid|urlencode }}/state?at={{ record.version }}">state here</a> ·
<a id="replay-here" href="{{ root }}/sessions/{{ sid|urlencode }}/replay?from={{ record.version }}">replay from here</a> ·
<a id="replay-whole" href="{{ root }}/sessions/{{ sid|urlencode }}/replay">replay this session</a>{% if child %} ·
<a id="child-trace" href="{{ root }}/sessions/{{ child|urlencode }}/trace">trace of the sub-agent</a>{% endif %}
{% if writable %}<form class="fork" method="post" action="{{ root }}/sessions/{{ sid|urlencode }}/fork">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="at" value="{{ record.version }}">
<button id="fork-here" title="a new session with the events up to here">fork here</button></form>{% endif %}</p>
{% for k, v in fields %}<details{% if loop.index <= 8 %} open{% endif %}><summary>{{ k }}</summary><pre>{{ v }}</pre></details>
{% endfor %}</div>
"""

_RUNS_STRIP = """<svg xmlns="http://www.w3.org/2000/svg" class="runs" width="{{ width }}" height="26" viewBox="0 0 {{ width }} 26" role="img" aria-label="latest runs">
{% for r in runs %}<a href="{{ root }}/sessions/{{ r.session|urlencode }}/trace"><rect class="run {{ r.status }}" x="{{ r.x }}" y="{{ 24 - r.h }}" width="10" height="{{ r.h }}"><title>{{ r.label }}</title></rect></a>
{% endfor %}</svg>"""

_ERROR = """{% extends "base" %}{% block body %}
<h1>{{ heading }}</h1><p><code>{{ code }}</code>: {{ message }}</p>{% endblock %}
"""

_ENV = jinja2.Environment(
    loader=jinja2.DictLoader(
        {
            "base": _BASE,
            "fleet": _FLEET,
            "tree": _TREE,
            "requests": _REQUESTS,
            "session": _SESSION,
            "log": _LOG,
            "state": _STATE,
            "replay": _REPLAY,
            "usage": _USAGE,
            "chart": _CHART,
            "error": _ERROR,
            "trace": _TRACE,
            "runs_strip": _RUNS_STRIP,
            "trace_chart": _TRACE_CHART,
            "trace_event": _TRACE_EVENT,
        }
    ),
    autoescape=True,
)
_ENV.globals["static_version"] = STATIC_VERSION


def render(name: str, **values: object) -> str:
    """Render template ``name`` with ``values`` (every value escaped)."""
    return _ENV.get_template(name).render(**values)


def fragment(name: str, **values: object) -> Markup:
    """Render ``name`` as a fragment to put into another page as it is (already escaped)."""
    return Markup(render(name, **values))
