// kiln report's renderer: reads the JSON that `kiln report` embedded (#kiln-data) and draws the
// page with uPlot. Each chart's container carries data-chart, data-series and data-points, and
// #kiln-summary holds a JSON summary once rendering ends, so that tests in a headless browser can
// check what was drawn.
(function () {
  'use strict';
  var DATA = JSON.parse(document.getElementById('kiln-data').textContent);
  var main = document.getElementById('kiln-main');
  var charts = [];  // {name, series, points}
  var PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d',
                 '#4b5563', '#ea580c'];
  var STAGES = ['train', 'val', 'validation', 'test'];

  function color(i) {
    return i < PALETTE.length ? PALETTE[i] : 'hsl(' + ((i * 137.5) % 360) + ',65%,45%)';
  }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') e.textContent = attrs[k];
        else if (k === 'class') e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      });
    }
    (children || []).forEach(function (c) { if (c) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }

  function fmt(v) {
    if (v === null || v === undefined || v === '') return '';
    if (typeof v !== 'number') return String(v);
    if (!isFinite(v)) return String(v);
    if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(3);
    return String(Math.round(v * 1e4) / 1e4);
  }

  // An axis label: short, and not "0" for a learning rate of 1e-5.
  function tick(v) {
    if (v === 0 || v === null) return String(v);
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(1).replace('e-', 'e−');
    return String(+v.toPrecision(4));
  }

  function seconds(s) {
    if (s === null || s === undefined) return '';
    if (s < 90) return s.toFixed(1) + ' s';
    if (s < 5400) return (s / 60).toFixed(1) + ' min';
    return (s / 3600).toFixed(2) + ' h';
  }

  // A series as the page holds it: x from first value and differences.
  function decode(s) {
    if (s.x) return s;
    var x = new Array(s.dx.length), acc = 0;
    for (var i = 0; i < s.dx.length; i++) { acc += s.dx[i]; x[i] = acc; }
    s.x = x;
    return s;
  }

  // Several series with their own x onto one x axis (uPlot's data layout), nulls where one has none.
  function join(list) {
    var seen = new Map();
    list.forEach(function (s) { for (var i = 0; i < s.x.length; i++) seen.set(s.x[i], true); });
    var xs = Array.from(seen.keys()).sort(function (a, b) { return a - b; });
    var index = new Map();
    xs.forEach(function (x, i) { index.set(x, i); });
    var data = [xs];
    list.forEach(function (s) {
      var ys = new Array(xs.length).fill(null);
      for (var i = 0; i < s.x.length; i++) ys[index.get(s.x[i])] = s.y[i];
      data.push(ys);
    });
    return data;
  }

  // One uPlot chart in `parent`; `list` is [{label, x, y, color, points}] with x and y arrays.
  var INTEGER_INCREMENTS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 2.5e4,
                            5e4, 1e5, 2e5, 2.5e5, 5e5, 1e6, 2e6, 5e6, 1e7];

  function chart(parent, name, title, list, options) {
    options = options || {};
    var box = el('div', {class: 'chart', 'data-chart': name});
    parent.appendChild(box);
    var data = join(list);
    var points = 0;
    for (var k = 1; k < data.length; k++) {
      for (var i = 0; i < data[k].length; i++) if (data[k][i] !== null) points++;
    }
    box.setAttribute('data-series', String(list.length));
    box.setAttribute('data-points', String(points));
    charts.push({name: name, series: list.length, points: points});
    var width = Math.max(320, Math.min(box.clientWidth || 600, 1400));
    var series = [{label: options.xLabel || 'step'}];
    list.forEach(function (s, i) {
      var spec = {label: s.label, stroke: s.color || color(i), width: 1.5, spanGaps: true,
                  value: function (u, v) { return v === null ? '–' : fmt(v); }};
      if (s.points) {
        spec.paths = function () { return null; };
        spec.points = {show: true, size: s.size || 7, stroke: s.color || color(i), fill: s.fill || s.color || color(i)};
      } else if (s.dash) {
        spec.dash = s.dash;
      }
      series.push(spec);
    });
    var opts = {
      title: title, width: width, height: options.height || 240, series: series,
      scales: {x: {time: false}, y: {distr: options.log ? 3 : 1}},
      axes: [{label: options.xLabel || 'step'}, {size: 64, values: function (u, ticks) { return ticks.map(tick); }}],
      legend: {live: list.length <= 12},
      cursor: {drag: {x: true, y: false}},
    };
    if (list.length > 12) opts.legend = {show: false};
    // Steps and trial numbers are whole: no tick at 0.5.
    var xLabel = options.xLabel || 'step';
    if (xLabel === 'step' || xLabel === 'trial') opts.axes[0].incrs = INTEGER_INCREMENTS;
    /* global uPlot */
    new uPlot(opts, data, box);
    return box;
  }

  function table(header, rows, options) {
    options = options || {};
    var t = el('table', options.attrs || {});
    var thead = el('thead'), tr = el('tr');
    header.forEach(function (h, c) {
      var th = el('th', {text: h});
      if (options.sortable) {
        th.className = 'sortable';
        th.addEventListener('click', function () { sortTable(t, c, th); });
      }
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    t.appendChild(thead);
    var tbody = el('tbody');
    rows.forEach(function (row, r) {
      var tr = el('tr', options.rowAttrs ? options.rowAttrs(r) : {});
      row.forEach(function (cell) {
        var td;
        if (cell instanceof Node) {
          td = el('td', {}, [cell]);
        } else {
          td = el('td', {text: fmt(cell)});
          if (typeof cell === 'number') { td.className = 'num'; td.setAttribute('data-value', String(cell)); }
        }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    t.appendChild(tbody);
    return el('div', {class: 'table-wrap'}, [t]);
  }

  function sortTable(t, c, th) {
    var dir = th.getAttribute('data-sort') === 'asc' ? 'desc' : 'asc';
    t.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-sort'); });
    th.setAttribute('data-sort', dir);
    var tbody = t.tBodies[0];
    var rows = Array.from(tbody.rows);
    function key(row) {
      var td = row.cells[c];
      var v = td.getAttribute('data-value');
      if (v !== null) return parseFloat(v);
      var n = parseFloat(td.textContent);
      return isNaN(n) || String(n) !== td.textContent.trim() ? td.textContent : n;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b), r;
      if (x === '' && y !== '') return 1;
      if (y === '' && x !== '') return -1;
      if (typeof x === 'number' && typeof y === 'number') r = x - y;
      else r = String(x).localeCompare(String(y), undefined, {numeric: true});
      return dir === 'asc' ? r : -r;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
  }

  // "train/loss" -> ["train", "loss"]; "lr-SGD" -> [null, "lr-SGD"].
  function splitStage(name) {
    var slash = name.indexOf('/');
    if (slash > 0 && STAGES.indexOf(name.slice(0, slash)) >= 0) return [name.slice(0, slash), name.slice(slash + 1)];
    return [null, name];
  }

  function isLearningRate(name) { return /^lr([-_/]|$)/.test(name) || /(^|\/)lr([-_]|$)/.test(name); }

  function lowerIsBetter(name) { return /loss|error|err\b|perplexity|ppl|wer|cer|mse|mae/i.test(name); }

  function overrideMap(run) {
    var m = {};
    run.overrides.forEach(function (o) {
      var eq = o.indexOf('=');
      if (eq < 0) return;
      var key = o.slice(0, eq).replace(/^[+~]+/, '');
      if (/^hydra[./]/.test(key)) return;
      m[key] = o.slice(eq + 1);
    });
    return m;
  }

  function lastValue(s) {
    for (var i = s.y.length - 1; i >= 0; i--) if (s.y[i] !== null) return s.y[i];
    return null;
  }

  function bestValue(name, s) {
    var best = null, low = lowerIsBetter(name);
    s.y.forEach(function (v) { if (v !== null && (best === null || (low ? v < best : v > best))) best = v; });
    return best;
  }

  // ---- across runs ----------------------------------------------------------------------------

  function allOverrideKeys() {
    var keys = {};
    DATA.runs.forEach(function (run) { Object.keys(overrideMap(run)).forEach(function (k) { keys[k] = true; }); });
    return Object.keys(keys).sort();
  }

  // The keys whose value differs between `maps` (or is missing from one); all of them for one map.
  function varyingKeys(keys, maps) {
    if (maps.length < 2) return keys;
    return keys.filter(function (k) {
      var first = maps[0][k];
      return maps.some(function (m) { return m[k] !== first; });
    });
  }

  // Overrides that vary between runs; those every run shares are said once, above the table.
  function runKeys() {
    return varyingKeys(allOverrideKeys(), DATA.runs.map(overrideMap));
  }

  function sharedOverrides(keys, maps) {
    var varying = varyingKeys(keys, maps);
    return maps.length < 2 ? [] : keys.filter(function (k) { return varying.indexOf(k) < 0; })
      .map(function (k) { return k + '=' + maps[0][k]; });
  }

  function evalSeriesNames() {
    var names = {};
    DATA.runs.forEach(function (run) {
      Object.keys(run.series).forEach(function (n) { if (/^(val|validation)\//.test(n)) names[n] = true; });
    });
    return Object.keys(names).sort();
  }

  function testNames() {
    var names = {};
    DATA.runs.forEach(function (run) { Object.keys(run.test).forEach(function (n) { names[n] = true; }); });
    return Object.keys(names).sort();
  }

  function renderRunsTable(section) {
    var keys = runKeys(), evals = evalSeriesNames(), tests = testNames();
    var shared = sharedOverrides(allOverrideKeys(), DATA.runs.map(overrideMap));
    var header = ['run', 'status', 'wall time', 'samples/s'].concat(keys);
    evals.forEach(function (n) { header.push(n + ' (final)', n + ' (best)'); });
    header = header.concat(tests);
    var rows = DATA.runs.map(function (run, r) {
      var o = overrideMap(run);
      var link = el('a', {href: '#run-' + r, text: run.name});
      var status = el('span', {class: 'status-' + run.status, text: run.status});
      var row = [link, status, run.wall === null ? '' : seconds(run.wall),
                 run.samples_per_second === null ? '' : run.samples_per_second];
      keys.forEach(function (k) { row.push(k in o ? numberOrText(o[k]) : ''); });
      evals.forEach(function (n) {
        var s = run.series[n];
        if (!s) { row.push('', ''); return; }
        decode(s);
        row.push(lastValue(s), bestValue(n, s));
      });
      tests.forEach(function (n) { row.push(n in run.test ? run.test[n] : ''); });
      return row;
    });
    section.appendChild(el('h2', {text: 'Runs (' + DATA.runs.length + ')'}));
    section.appendChild(el('p', {class: 'muted', text: 'Click a column to sort. Overrides that differ between runs are ' +
        'columns; (final) is the last value a run logged, (best) the lowest loss or highest score.'}));
    if (shared.length) section.appendChild(el('p', {class: 'muted', id: 'shared-overrides', text: 'Every run: ' + shared.join(' ')}));
    section.appendChild(table(header, rows, {sortable: true, attrs: {id: 'runs-table'},
                                             rowAttrs: function (r) { return {'data-run': String(r)}; }}));
  }

  function numberOrText(s) {
    var n = Number(s);
    return s !== '' && isFinite(n) ? n : s;
  }

  function renderOverlay(section) {
    var names = {};
    DATA.runs.forEach(function (run) { Object.keys(run.series).forEach(function (n) { names[n] = true; }); });
    names = Object.keys(names).sort();
    if (!names.length || DATA.runs.length < 2) return;
    var preferred = ['val/loss', 'val/acc', 'train/loss'].filter(function (n) { return names.indexOf(n) >= 0; });
    var chosen = preferred.length ? preferred[0] : names[0];
    var select = el('select', {id: 'overlay-metric'});
    names.forEach(function (n) {
      var opt = el('option', {value: n, text: n});
      if (n === chosen) opt.selected = true;
      select.appendChild(opt);
    });
    var holder = el('div', {id: 'overlay'});
    section.appendChild(el('h2', {text: 'Compare runs'}));
    section.appendChild(el('div', {class: 'controls'}, [el('label', {}, ['metric ', select])]));
    section.appendChild(holder);
    function draw() {
      holder.textContent = '';
      var n = select.value, list = [];
      DATA.runs.forEach(function (run, r) {
        var s = run.series[n];
        if (!s) return;
        decode(s);
        list.push({label: run.name, x: s.x, y: s.y, color: color(r)});
      });
      chart(holder, 'overlay', n + ' across runs', list, {height: 320});
    }
    select.addEventListener('change', draw);
    draw();
  }

  // Mean ± std of the final metrics of the runs that share one override's value.
  function renderGrouping(section) {
    var keys = runKeys(), tests = testNames();
    if (!keys.length || DATA.runs.length < 2 || !tests.length) return;
    var select = el('select', {id: 'group-by'});
    keys.forEach(function (k) { select.appendChild(el('option', {value: k, text: k})); });
    var holder = el('div');
    section.appendChild(el('h3', {text: 'Group by an override (mean ± std over the other runs)'}));
    section.appendChild(el('div', {class: 'controls'}, [el('label', {}, ['override ', select])]));
    section.appendChild(holder);
    function draw() {
      holder.textContent = '';
      var key = select.value, groups = {};
      DATA.runs.forEach(function (run) {
        var v = overrideMap(run)[key];
        v = v === undefined ? '(not set)' : v;
        (groups[v] = groups[v] || []).push(run);
      });
      var rows = Object.keys(groups).sort(function (a, b) {
        var x = Number(a), y = Number(b);
        return isFinite(x) && isFinite(y) && a !== '' && b !== '' ? x - y : a.localeCompare(b, undefined, {numeric: true});
      })
        .map(function (v) {
          var runs = groups[v], row = [v, runs.length];
          tests.forEach(function (n) {
            var xs = runs.map(function (r) { return r.test[n]; }).filter(function (x) { return x !== undefined; });
            if (!xs.length) { row.push(''); return; }
            var mean = xs.reduce(function (a, b) { return a + b; }, 0) / xs.length;
            var sd = Math.sqrt(xs.reduce(function (a, b) { return a + (b - mean) * (b - mean); }, 0) / xs.length);
            row.push(fmt(mean) + ' ± ' + fmt(sd));
          });
          return row;
        });
      holder.appendChild(table([key, 'runs'].concat(tests), rows, {attrs: {id: 'group-table'}}));
    }
    select.addEventListener('change', draw);
    draw();
  }

  function renderConfigDiff(section) {
    if (DATA.runs.length < 2) return;
    var a = el('select', {id: 'diff-a'}), b = el('select', {id: 'diff-b'});
    DATA.runs.forEach(function (run, r) {
      a.appendChild(el('option', {value: String(r), text: run.name}));
      b.appendChild(el('option', {value: String(r), text: run.name}));
    });
    b.value = '1';
    var holder = el('div');
    section.appendChild(el('h3', {text: 'Config diff'}));
    section.appendChild(el('div', {class: 'controls'}, [el('label', {}, ['run ', a]), el('label', {}, ['vs ', b])]));
    section.appendChild(holder);
    function draw() {
      holder.textContent = '';
      var x = {}, y = {}, keys = {};
      DATA.runs[+a.value].config.forEach(function (kv) { x[kv[0]] = kv[1]; keys[kv[0]] = true; });
      DATA.runs[+b.value].config.forEach(function (kv) { y[kv[0]] = kv[1]; keys[kv[0]] = true; });
      var rows = Object.keys(keys).sort().filter(function (k) { return x[k] !== y[k]; })
        .map(function (k) { return [k, k in x ? x[k] : '(absent)', k in y ? y[k] : '(absent)']; });
      if (!rows.length) holder.appendChild(el('p', {class: 'muted', text: 'The two resolved configs are the same.'}));
      else holder.appendChild(table(['key', DATA.runs[+a.value].name, DATA.runs[+b.value].name], rows,
                                    {attrs: {id: 'diff-table'}}));
    }
    a.addEventListener('change', draw);
    b.addEventListener('change', draw);
    draw();
  }

  // ---- sweeps ---------------------------------------------------------------------------------

  // The objective of a sweep: Optuna's own; for a grid, the first test metric its runs wrote.
  function sweepObjective(sweep) {
    if (sweep.objectives.length) {
      return {name: sweep.objectives[0], maximize: (sweep.directions[0] || 'minimize') === 'maximize',
              value: function (t) { return t.values.length ? t.values[0] : null; }};
    }
    var names = {};
    sweep.trials.forEach(function (t) {
      if (t.run >= 0) Object.keys(DATA.runs[t.run].test).forEach(function (n) { names[n] = true; });
    });
    names = Object.keys(names).sort();
    if (!names.length) return null;
    var name = names.filter(function (n) { return /acc/.test(n); })[0] || names[0];
    return {name: name, maximize: !lowerIsBetter(name),
            value: function (t) { return t.run >= 0 && name in DATA.runs[t.run].test ? DATA.runs[t.run].test[name] : null; }};
  }

  function isFailed(t) { return /^(fail|failed)/i.test(t.state); }
  function isPruned(t) { return /^pruned$/i.test(t.state); }

  // ---- parallel coordinates -------------------------------------------------------------------
  // uPlot has no such chart, so it is a line chart on its own terms: x is the axis index (one per
  // swept parameter, the objective last), each trial one series through its values normalized per
  // axis to [0, 1]; the x axis's splits and values name the axes, its grid lines are the axes, and
  // a draw hook writes each axis's range (or its choices) in real units onto the canvas.

  // One axis: {name, label, kind: 'number'|'choice', log, lo, hi, choices, pos(value) -> [0,1]|null}.
  // `spec` is what the sweep's search space says of the parameter (multirun.yaml), if anything.
  function parallelAxis(name, values, spec) {
    var axis = {name: name, label: name, log: false};
    var numeric = values.every(function (v) { return v === '' || isFinite(Number(v)); });
    if ((spec && (spec.kind === 'choice' || spec.kind === 'glob')) || !numeric) {
      // Choices evenly spaced, in the search space's order, then any value it does not list.
      var choices = spec && spec.choices ? spec.choices.slice() : [];
      values.forEach(function (v) { if (v !== '' && choices.indexOf(v) < 0) choices.push(v); });
      axis.kind = 'choice';
      axis.choices = choices;
      axis.pos = function (v) {
        var i = choices.indexOf(v);
        return i < 0 ? null : choices.length < 2 ? 0.5 : i / (choices.length - 1);
      };
      return axis;
    }
    axis.kind = 'number';
    axis.log = !!(spec && spec.log);
    var xs = values.map(Number).filter(function (v, i) {
      return values[i] !== '' && isFinite(v) && (!axis.log || v > 0);
    });
    if (spec && typeof spec.low === 'number' && typeof spec.high === 'number') xs.push(spec.low, spec.high);
    if (!xs.length) return null;
    axis.lo = Math.min.apply(null, xs);
    axis.hi = Math.max.apply(null, xs);
    if (axis.log) axis.label = name + ' (log)';
    var f = axis.log ? Math.log : function (v) { return v; };
    var a = f(axis.lo), b = f(axis.hi);
    axis.pos = function (v) {
      if (v === '' || v === null || v === undefined) return null;
      v = Number(v);
      if (!isFinite(v) || (axis.log && v <= 0)) return null;
      return b > a ? (f(v) - a) / (b - a) : 0.5;
    };
    return axis;
  }

  function mix(a, b, t) {  // two '#rrggbb' colours, t in [0, 1] from a to b
    var c = [0, 2, 4].map(function (o) {
      var x = parseInt(a.substr(1 + o, 2), 16), y = parseInt(b.substr(1 + o, 2), 16);
      return Math.round(x + (y - x) * t);
    });
    return 'rgb(' + c.join(',') + ')';
  }

  var WORST = '#f59e0b', BEST = '#1d4ed8', NO_OBJECTIVE = '#9ca3af';

  function renderParallel(parent, sweep, s, params, objective) {
    var space = {};
    (sweep.space || []).forEach(function (p) { space[p.name] = p; });
    var trials = sweep.trials.slice().sort(function (a, b) { return a.number - b.number; });
    var scored = function (t) {
      var v = isFailed(t) || isPruned(t) ? null : objective.value(t);
      return v !== null && isFinite(v) ? v : null;
    };
    var axes = params.map(function (p) {
      var values = trials.map(function (t) { return p in t.params ? String(t.params[p]) : ''; });
      return parallelAxis(p, values, space[p]);
    }).filter(function (a) { return a !== null; });
    var scores = trials.map(scored).filter(function (v) { return v !== null; });
    if (!scores.length) return;
    var objAxis = parallelAxis(objective.name, scores.map(String), null);
    objAxis.label = objective.name + (objective.maximize ? ' (max)' : ' (min)');
    axes.push(objAxis);
    var k = axes.length - 1;
    // Failed, pruned and unscored trials first (under the others), grey and dashed, with no point on
    // the objective's axis; then the scored ones from worst to best, so that the best lie on top.
    var order = trials.map(function (t) { return {t: t, v: scored(t)}; });
    var rank = function (v) { return objective.maximize ? v : -v; };
    order.sort(function (a, b) {
      if (a.v === null || b.v === null) return (a.v === null ? 0 : 1) - (b.v === null ? 0 : 1);
      return rank(a.v) - rank(b.v);
    });
    var lo = objAxis.lo, hi = objAxis.hi;
    var xs = axes.map(function (a, i) { return i; });
    var data = [xs], series = [{label: 'axis'}], points = 0;
    order.forEach(function (o) {
      var ys = axes.map(function (a, i) {
        if (i === k) return o.v === null ? null : a.pos(String(o.v));
        return a.pos(o.t.params[a.name] === undefined ? '' : String(o.t.params[a.name]));
      });
      ys.forEach(function (y) { if (y !== null) points++; });
      data.push(ys);
      var good = o.v === null ? 0 : hi > lo ? (rank(o.v) - rank(objective.maximize ? lo : hi)) / (hi - lo) : 1;
      var stroke = o.v === null ? NO_OBJECTIVE : mix(WORST, BEST, good);
      var spec = {label: 'trial ' + o.t.number, stroke: stroke, width: o.v === null ? 1 : 1.5, spanGaps: false,
                  points: {show: true, size: 4, stroke: stroke, fill: stroke}};
      if (o.v === null) spec.dash = [5, 4];
      series.push(spec);
    });
    var name = 'sweep-' + s + '-parallel';
    parent.appendChild(el('p', {class: 'muted', text: 'Each line a trial through its parameters (normalized per axis; ' +
        'range or choices in real units at each axis) to ' + objective.name + ', coloured from amber (worst) to blue ' +
        '(best); failed, pruned and unscored trials grey and dashed, with nothing on the last axis.'}));
    var box = el('div', {class: 'chart', 'data-chart': name});
    parent.appendChild(box);
    box.setAttribute('data-series', String(order.length));
    box.setAttribute('data-points', String(points));
    box.setAttribute('data-kind', 'parallel');
    box.setAttribute('data-axes', String(axes.length));
    box.setAttribute('data-axis-scales', axes.map(function (a) {
      return a.kind === 'choice' ? 'choice' : a.log ? 'log' : 'linear';
    }).join(','));
    charts.push({name: name, series: order.length, points: points, axes: axes.length});
    var readout = el('p', {class: 'muted parallel-readout', text: 'Point near an axis to see a trial.'});
    parent.appendChild(readout);
    function describe(i) {
      var o = order[i - 1];
      var parts = axes.slice(0, k).map(function (a) {
        return a.name + '=' + (o.t.params[a.name] === undefined ? '–' : o.t.params[a.name]);
      });
      return 'trial ' + o.t.number + ' (' + o.t.state + '): ' + parts.join(' ') + ' → ' + objective.name + ' ' +
             (o.v === null ? '–' : fmt(o.v));
    }
    // Real units at each axis: its range above and below it (numbers), or every choice beside it.
    function drawLabels(u) {
      var ctx = u.ctx, px = window.devicePixelRatio || 1;
      ctx.save();
      ctx.font = Math.round(12 * px) + 'px system-ui, sans-serif';
      ctx.fillStyle = '#374151';
      ctx.strokeStyle = 'rgba(255, 255, 255, 0.85)';  // a halo, to read the labels over dense lines
      ctx.lineWidth = 3 * px;
      ctx.lineJoin = 'round';
      var text = function (t, x, y) { ctx.strokeText(t, x, y); ctx.fillText(t, x, y); };
      axes.forEach(function (a, i) {
        var x = u.valToPos(i, 'x', true);
        if (a.kind === 'choice') {
          var many = a.choices.length > 12;
          ctx.textAlign = i === k ? 'right' : 'left';
          ctx.textBaseline = 'middle';
          a.choices.forEach(function (c, j) {
            if (many && j !== 0 && j !== a.choices.length - 1) return;
            text(c.length > 16 ? c.slice(0, 15) + '…' : c, x + (i === k ? -5 : 5) * px, u.valToPos(a.pos(c), 'y', true));
          });
        } else {
          ctx.textAlign = 'center';
          ctx.textBaseline = 'bottom';
          text(tick(a.hi), x, u.valToPos(1, 'y', true) - 6 * px);
          ctx.textBaseline = 'top';
          text(tick(a.lo), x, u.valToPos(0, 'y', true) + 6 * px);
        }
      });
      ctx.restore();
    }
    var width = Math.max(320, Math.min(box.clientWidth || 900, 1400));
    var opts = {
      title: 'Parameters and ' + objective.name + ' (parallel coordinates; one line per trial)',
      width: width, height: 300, series: series,
      scales: {x: {time: false, range: [-0.12 * Math.max(k, 1), k + 0.12 * Math.max(k, 1)]}, y: {range: [-0.12, 1.12]}},
      axes: [{splits: function () { return xs; },
              values: function (u, splits) { return splits.map(function (i) { return axes[i] ? axes[i].label : ''; }); },
              grid: {show: true, stroke: '#6b7280', width: 1}, ticks: {show: false}, size: 36},
             {show: false}],
      legend: {show: false},
      cursor: {drag: {x: false, y: false}, focus: {prox: 12}, points: {show: false}},
      focus: {alpha: 0.15},
      hooks: {draw: [drawLabels],
              setSeries: [function (u, i) { readout.textContent = i ? describe(i) : 'Point near an axis to see a trial.'; }]},
    };
    new uPlot(opts, data, box);
  }

  function renderSweep(section, sweep, s) {
    section.appendChild(el('h2', {text: 'Sweep ' + sweep.name + ' (' + sweep.sweeper + ', ' + sweep.trials.length + ' trials)'}));
    var counts = {};
    sweep.trials.forEach(function (t) { counts[t.state] = (counts[t.state] || 0) + 1; });
    section.appendChild(el('p', {class: 'muted', text: Object.keys(counts).map(function (k) { return counts[k] + ' ' + k; }).join(', ')}));
    var objective = sweepObjective(sweep);
    var params = {};
    sweep.trials.forEach(function (t) { Object.keys(t.params).forEach(function (k) { params[k] = true; }); });
    var maps = sweep.trials.map(function (t) { return t.params; });
    var shared = sharedOverrides(Object.keys(params).sort(), maps);
    params = varyingKeys(Object.keys(params).sort(), maps);
    if (shared.length) section.appendChild(el('p', {class: 'muted', text: 'Every trial: ' + shared.join(' ')}));
    if (objective) {
      var xs = [], values = [], best = [], failed = [], pruned = [], current = null;
      var sorted = sweep.trials.slice().sort(function (a, b) { return a.number - b.number; });
      var finite = sorted.map(objective.value).filter(function (v) { return v !== null; });
      var floor = finite.length ? Math.min.apply(null, finite) : 0;
      sorted.forEach(function (t) {
        var v = isFailed(t) || isPruned(t) ? null : objective.value(t);
        if (v !== null && (current === null || (objective.maximize ? v > current : v < current))) current = v;
        xs.push(t.number);
        values.push(v);
        best.push(current);
        failed.push(isFailed(t) ? floor : null);
        pruned.push(isPruned(t) ? floor : null);
      });
      var list = [{label: objective.name, x: xs, y: values, points: true, color: '#2563eb'},
                  {label: 'best so far', x: xs, y: best, color: '#16a34a'}];
      if (failed.some(function (v) { return v !== null; })) {
        list.push({label: 'failed', x: xs, y: failed, points: true, color: '#dc2626', fill: '#fff', size: 9});
      }
      if (pruned.some(function (v) { return v !== null; })) {
        list.push({label: 'pruned', x: xs, y: pruned, points: true, color: '#d97706', fill: '#fff', size: 9});
      }
      var holder = el('div', {class: 'charts'});
      section.appendChild(holder);
      chart(holder, 'sweep-' + s + '-history', 'Optimization history (' + (objective.maximize ? 'maximize ' : 'minimize ') +
            objective.name + ')', list, {xLabel: 'trial'});
      if (params.length) renderParallel(section, sweep, s, params, objective);
      // Parameter against objective: one scatter per numeric parameter.
      params.forEach(function (p) {
        var pts = sweep.trials.map(function (t) { return [Number(t.params[p]), objective.value(t)]; })
          .filter(function (xy) { return isFinite(xy[0]) && xy[1] !== null && isFinite(xy[1]); });
        if (pts.length < 2) return;
        pts.sort(function (a, b) { return a[0] - b[0]; });
        chart(holder, 'sweep-' + s + '-param-' + p, p + ' vs ' + objective.name,
              [{label: objective.name, x: pts.map(function (q) { return q[0]; }), y: pts.map(function (q) { return q[1]; }),
                points: true, color: '#7c3aed'}], {xLabel: p, height: 200});
      });
    }
    var header = ['trial', 'state'].concat(params).concat(objective ? [objective.name] : []).concat(['seconds', 'run']);
    var rows = sweep.trials.map(function (t) {
      var row = [t.number, el('span', {class: isFailed(t) ? 'status-failed' : isPruned(t) ? 'status-pruned' : '', text: t.state})];
      params.forEach(function (p) { row.push(p in t.params ? numberOrText(t.params[p]) : ''); });
      if (objective) row.push(isFailed(t) || isPruned(t) ? '' : objective.value(t) === null ? '' : objective.value(t));
      row.push(t.seconds === null ? '' : t.seconds);
      row.push(t.run >= 0 ? el('a', {href: '#run-' + t.run, text: DATA.runs[t.run].name}) : '(no run folder)');
      return row;
    });
    section.appendChild(table(header, rows, {sortable: true, attrs: {class: 'sweep-table', 'data-sweep': String(s)}}));
    if (sweep.notes.length) section.appendChild(notesList(sweep.notes));
  }

  // ---- one run --------------------------------------------------------------------------------

  function notesList(notes) {
    return el('ul', {class: 'notes'}, notes.map(function (n) { return el('li', {text: n}); }));
  }

  function renderRunBody(body, run, r) {
    var meta = [['folder', run.dir], ['status', run.status], ['wall time', run.wall === null ? '(no train.log)' : seconds(run.wall)],
                ['overrides', run.overrides.length ? run.overrides.join(' ') : '(none)']];
    if (run.samples_per_second !== null) meta.push(['samples/s (training)', fmt(run.samples_per_second)]);
    body.appendChild(table(['', ''], meta, {attrs: {class: 'kv'}}));
    if (run.notes.length) body.appendChild(notesList(run.notes));
    if (run.checkpoints.length) {
      body.appendChild(el('h3', {text: 'Checkpoints'}));
      body.appendChild(el('ul', {}, run.checkpoints.map(function (c) {
        return el('li', {}, [el('a', {href: c.href, text: c.name}), ' ' + (c.bytes >= 0 ? (c.bytes / 1048576).toFixed(1) + ' MB' : '')]);
      })));
    }
    // Curves: train and val of one name share a chart (train/loss_step, train/loss_epoch and
    // val/loss: "loss"); learning rates share one; `epoch` only when it is the one thing logged.
    var groups = {}, order = [];
    Object.keys(run.series).sort().forEach(function (name) {
      if (name === 'epoch' && Object.keys(run.series).length > 1) return;
      if (splitStage(name)[0] === 'test') return;  // logged once; in the test metrics below
      var key = isLearningRate(name) ? 'learning rate' : splitStage(name)[1].replace(/_(step|epoch)$/, '');
      if (!(key in groups)) { groups[key] = []; order.push(key); }
      groups[key].push(name);
    });
    if (order.length) {
      var toEpochs = epochMapper(run);
      var axis = el('select', {class: 'x-axis', 'data-run': String(r)});
      axis.appendChild(el('option', {value: 'step', text: 'step'}));
      if (toEpochs) axis.appendChild(el('option', {value: 'epoch', text: 'epoch'}));
      body.appendChild(el('h3', {}, ['Curves ', el('label', {class: 'muted'}, ['against ', axis])]));
      var holder = el('div', {class: 'charts'});
      body.appendChild(holder);
      var drawCurves = function () {
        holder.textContent = '';
        var byEpoch = axis.value === 'epoch';
        order.forEach(function (key) {
          var list = groups[key].map(function (name, i) {
            var s = decode(run.series[name]);
            return {label: name, x: byEpoch ? s.x.map(toEpochs) : s.x, y: s.y, color: color(i)};
          });
          var raw = groups[key].reduce(function (a, n) { return a + run.series[n].n; }, 0);
          var box = chart(holder, 'run-' + r + '-' + key + (byEpoch ? '-epoch' : ''), key, list,
                          {height: 220, xLabel: byEpoch ? 'epoch' : 'step'});
          box.setAttribute('data-raw-points', String(raw));
        });
      };
      axis.addEventListener('change', function () { guarded(drawCurves); summarize(); });
      if (toEpochs && hashWords().indexOf('epoch') >= 0) axis.value = 'epoch';
      drawCurves();
    }
    var tests = Object.keys(run.test).sort();
    if (tests.length) {
      body.appendChild(el('h3', {text: 'Test metrics'}));
      body.appendChild(table(['metric', 'value'], tests.map(function (k) { return [k, run.test[k]]; }),
                             {attrs: {class: 'test-metrics'}}));
    }
    run.confusion.forEach(function (m) { body.appendChild(heatmap(m)); });
    run.per_class.forEach(function (t) {
      body.appendChild(el('h3', {text: t.name.replace(/_/g, ' ')}));
      body.appendChild(table(t.header, t.rows.map(function (row) { return row.map(numberOrText); })));
    });
    if (run.config.length) {
      var details = el('details', {}, [el('summary', {text: 'Resolved config (' + run.config.length + ' keys)'})]);
      details.appendChild(table(['key', 'value'], run.config, {attrs: {class: 'kv config'}}));
      body.appendChild(details);
    }
  }

  // Steps to epochs completed, from the `epoch` column: epoch E ends at the last step that logged
  // it, which is E + 1 epochs; linear in between (and past the last one, at its pace).
  function epochMapper(run) {
    var e = run.series.epoch;
    if (!e) return null;
    decode(e);
    var last = {};
    for (var i = 0; i < e.x.length; i++) if (e.y[i] !== null) last[e.y[i]] = Math.max(last[e.y[i]] || 0, e.x[i]);
    var knots = [[0, 0]].concat(Object.keys(last).map(Number).sort(function (a, b) { return a - b; })
      .map(function (ep) { return [last[ep], ep + 1]; }));
    knots = knots.filter(function (k, j) { return j === 0 || k[0] > knots[j - 1][0]; });
    if (knots.length < 2) return null;
    return function (x) {
      var j = 1;
      while (j < knots.length - 1 && knots[j][0] < x) j++;
      var a = knots[j - 1], b = knots[j];
      return a[1] + (x - a[0]) * (b[1] - a[1]) / (b[0] - a[0]);
    };
  }

  // A confusion matrix as a table whose cells are shaded by their share of the true class's row.
  function heatmap(m) {
    var wrap = el('div', {}, [el('h3', {text: m.name.replace(/_/g, ' ') + ' (rows: true class, columns: predicted)'})]);
    var t = el('table', {class: 'heatmap', 'data-classes': String(m.rows.length)});
    var head = el('tr');
    m.header.forEach(function (h) { head.appendChild(el('th', {text: h})); });
    t.appendChild(el('thead', {}, [head]));
    var tbody = el('tbody');
    m.rows.forEach(function (row) {
      var tr = el('tr', {}, [el('th', {text: row[0]})]);
      var counts = row.slice(1).map(Number), total = counts.reduce(function (a, b) { return a + b; }, 0) || 1;
      counts.forEach(function (c) {
        var share = c / total;
        tr.appendChild(el('td', {text: String(c), title: (100 * share).toFixed(1) + '% of ' + row[0],
                                 style: 'background: rgba(37, 99, 235, ' + share.toFixed(3) + '); color: ' +
                                        (share > 0.55 ? '#fff' : 'inherit')}));
      });
      tbody.appendChild(tr);
    });
    t.appendChild(tbody);
    wrap.appendChild(el('div', {class: 'table-wrap'}, [t]));
    return wrap;
  }

  // openRuns: the names of the runs open before a live refresh (null on the first drawing).
  function renderRuns(section, openRuns) {
    section.appendChild(el('h2', {text: 'Each run'}));
    var openAll = hashWords().indexOf('all') >= 0;
    DATA.runs.forEach(function (run, r) {
      var details = el('details', {class: 'run', id: 'run-' + r, 'data-run': String(r)},
                       [el('summary', {text: run.name + ' — ' + run.status})]);
      var rendered = false;
      function render() {
        if (rendered) return;
        rendered = true;
        var body = el('div');
        details.appendChild(body);
        guarded(function () { renderRunBody(body, run, r); });
        summarize();
      }
      details.addEventListener('toggle', function () { if (details.open) render(); });
      section.appendChild(details);
      if (openRuns ? openRuns[run.name] : r === 0 || openAll) { details.open = true; render(); }
    });
  }

  // ---- page -----------------------------------------------------------------------------------

  // report.html#all,epoch: every run open, curves against epochs (for links and tests).
  function hashWords() { return location.hash.replace(/^#/, '').split(','); }

  function guarded(fn) {
    try { fn(); } catch (e) { window.kilnErrors.push(String(e && e.stack || e)); }
  }

  function summarize() {
    var errors = window.kilnErrors;
    var box = document.getElementById('kiln-errors');
    box.hidden = errors.length === 0;
    box.textContent = errors.length ? 'Errors while rendering: ' + errors.join(' | ') : '';
    var summary = {runs: DATA.runs.length, sweeps: DATA.sweeps.length, charts: charts, errors: errors.length,
                   rows: document.querySelectorAll('#runs-table tbody tr').length};
    document.getElementById('kiln-summary').textContent = JSON.stringify(summary);
    document.body.setAttribute('data-errors', String(errors.length));
    document.body.setAttribute('data-charts', String(charts.length));
  }

  function renderPage(openRuns) {
  var t0 = performance.now();
  charts = [];
  main.textContent = '';
  var notes = DATA.notes.slice();
  DATA.runs.forEach(function (run) { run.notes.forEach(function (n) { notes.push(run.name + ': ' + n); }); });
  DATA.sweeps.forEach(function (sw) { sw.notes.forEach(function (n) { notes.push(sw.name + ': ' + n); }); });
  document.getElementById('kiln-counts').textContent = DATA.runs.length + ' run(s), ' + DATA.sweeps.length +
      ' sweep(s); curves thinned to at most ' + 2 * DATA.display_buckets + ' points (the minimum and maximum of each bucket).';
  var sections = {};
  ['skipped', 'runs', 'sweeps', 'compare', 'each'].forEach(function (k) {
    sections[k] = el('section', {id: 'section-' + k});
    main.appendChild(sections[k]);
  });
  if (notes.length) {
    sections.skipped.appendChild(el('h2', {text: 'Skipped or incomplete (' + notes.length + ')'}));
    sections.skipped.appendChild(notesList(notes));
  }
  guarded(function () { renderRunsTable(sections.runs); });
  DATA.sweeps.forEach(function (sweep, s) { guarded(function () { renderSweep(sections.sweeps, sweep, s); }); });
  guarded(function () { renderOverlay(sections.compare); });
  guarded(function () { renderGrouping(sections.compare); });
  guarded(function () { renderConfigDiff(sections.compare); });
  guarded(function () { renderRuns(sections.each, openRuns); });
  document.body.setAttribute('data-render-ms', String(Math.round(performance.now() - t0)));
  summarize();
  }

  renderPage(null);
  // Milliseconds from navigation start: loading, parsing the page and its data, drawing.
  document.body.setAttribute('data-ready-ms', String(Math.round(performance.now())));

  // `kiln dashboard`: the same page, its data fetched again every few seconds and redrawn when it
  // changed, keeping open the runs that were open.
  if (window.kilnLive) {
    var last = document.getElementById('kiln-data').textContent, refreshes = 0;
    setInterval(function () {
      fetch('data.json', {cache: 'no-store'}).then(function (r) { return r.text(); }).then(function (text) {
        if (text === last) return;
        last = text;
        var open = {};
        document.querySelectorAll('details.run').forEach(function (d) {
          if (d.open) open[DATA.runs[+d.getAttribute('data-run')].name] = true;
        });
        DATA = JSON.parse(text);
        renderPage(open);
        document.body.setAttribute('data-refreshes', String(++refreshes));
      }).catch(function (e) { document.getElementById('kiln-counts').textContent = 'dashboard unreachable: ' + e; });
    }, window.kilnLive);
  }
})();
