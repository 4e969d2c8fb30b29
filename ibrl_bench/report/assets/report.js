/* ibrl-bench report: metric tabs, sortable tables, and the transcript browser.
   Inlined into report.html. Transcript text is untrusted (it is what models wrote): it is only
   ever inserted with textContent, never as HTML. */
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('episodes-data').textContent);
  var episodes = data.episodes;
  var byKey = {};
  episodes.forEach(function (e) { byKey[e.k] = e; });

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /* ---- tabs: one heatmap per metric ---- */
  document.querySelectorAll('.tabs').forEach(function (tabs) {
    tabs.addEventListener('click', function (ev) {
      var button = ev.target.closest('button[data-target]');
      if (!button) return;
      tabs.querySelectorAll('button').forEach(function (b) {
        var on = b === button;
        b.setAttribute('aria-pressed', on ? 'true' : 'false');
        var panel = document.getElementById(b.getAttribute('data-target'));
        if (panel) panel.hidden = !on;
      });
    });
  });

  /* ---- sortable tables: click a header; cells may carry data-sort ---- */
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('thead th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute('data-dir') === 'desc' ? 1 : -1;
        th.setAttribute('data-dir', dir === 1 ? 'asc' : 'desc');
        function key(row) {
          var cell = row.cells[col];
          var v = cell.getAttribute('data-sort');
          if (v === null) return cell.textContent.trim().toLowerCase();
          var f = parseFloat(v);
          return isNaN(f) ? -Infinity : f;
        }
        rows.sort(function (a, b) { var x = key(a), y = key(b); return x < y ? -dir : x > y ? dir : 0; });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });

  /* ---- transcript browser ---- */
  var f = {
    policy: document.getElementById('f-policy'), counterpart: document.getElementById('f-counterpart'),
    role: document.getElementById('f-role'), status: document.getElementById('f-status'),
    outcome: document.getElementById('f-outcome'), scenario: document.getElementById('f-scenario')
  };
  function fill(select, values, labels) {
    values.forEach(function (v, i) { var o = el('option', null, labels ? labels[i] : v); o.value = String(v); select.appendChild(o); });
  }
  fill(f.policy, data.policies.map(function (_, i) { return i; }), data.policies);
  fill(f.counterpart, data.counterparts.map(function (_, i) { return i; }), data.counterparts);
  fill(f.role, data.roles);
  fill(f.status, data.statuses);

  var list = document.getElementById('episode-rows');
  var count = document.getElementById('episode-count');
  var more = document.getElementById('episode-more');
  var viewer = document.getElementById('viewer');
  var PAGE = 200, shown = PAGE, matches = [], selected = null, inflating = null;

  // The turns of every episode come deflated (data.turns, base64): inflated on the first episode
  // opened, so a large report opens without parsing them.
  function loadTurns() {
    if (!inflating) {
      var bin = atob(data.turns), bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      var inflated = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
      inflating = new Response(inflated).json().then(function (all) {
        episodes.forEach(function (e, j) { e.t = all[j]; });
      });
    }
    return inflating;
  }

  function matchesFilters(e) {
    if (f.policy.value !== '' && String(e.p) !== f.policy.value) return false;
    if (f.counterpart.value !== '' && String(e.c) !== f.counterpart.value) return false;
    if (f.role.value !== '' && e.r !== f.role.value) return false;
    if (f.status.value !== '' && e.st !== f.status.value) return false;
    if (f.outcome.value === 'success' && !e.win) return false;
    if (f.outcome.value === 'failure' && e.win) return false;
    var q = f.scenario.value.trim().toLowerCase();
    if (q && e.s.toLowerCase().indexOf(q) < 0 && e.k.indexOf(q) < 0) return false;
    return true;
  }
  function fmt(x) { return x === null || x === undefined ? '' : x.toFixed(data.digits); }
  function render() {
    matches = episodes.filter(matchesFilters);
    list.textContent = '';
    matches.slice(0, shown).forEach(function (e) {
      var tr = el('tr', 'ep' + (e.k === selected ? ' sel' : ''));
      tr.setAttribute('data-key', e.k);
      tr.appendChild(el('td', null, data.policies[e.p] + ' \u00b7 ' + data.counterparts[e.c] + ' \u00b7 ' + e.r));
      [e.s, e.sd].forEach(function (v) { tr.appendChild(el('td', null, v)); });
      tr.appendChild(el('td', 'status-' + e.st, e.st));
      tr.appendChild(el('td', e.win ? 'win' : 'loss', e.win ? '\u2713 success' : '\u2717 failure'));
      tr.appendChild(el('td', 'num', fmt(e.ps)));
      list.appendChild(tr);
    });
    count.textContent = matches.length + ' of ' + episodes.length + ' episodes match' +
      (data.total > episodes.length ? ' (the report holds ' + episodes.length + ' of the run\u2019s ' + data.total + '; raise --max-episodes for more)' : '');
    more.hidden = matches.length <= shown;
  }
  function refilter() { shown = PAGE; render(); }
  Object.keys(f).forEach(function (k) { f[k].addEventListener(k === 'scenario' ? 'input' : 'change', refilter); });
  more.addEventListener('click', function () { shown += PAGE; render(); });
  list.addEventListener('click', function (ev) {
    var tr = ev.target.closest('tr[data-key]');
    if (tr) openEpisode(tr.getAttribute('data-key'), true);
  });

  // What each side knew: Deal-or-NoDeal's item counts and values as one table, any other domain's
  // private brief as a list of its fields.
  function privateViews(e, policy, counterpart) {
    var views = (data.private || {})[e.s];
    var box = el('div', 'private-info');
    if (!views) {
      box.appendChild(el('div', 'small', 'private information not available for this scenario' +
        (data.private_note ? ' (' + data.private_note + ')' : '')));
      return box;
    }
    var roles = Object.keys(views).sort(function (x, y) { return (x === e.r ? 0 : 1) - (y === e.r ? 0 : 1); });
    var who = function (r) { return (r === e.r ? policy : counterpart) + ' (' + r + ')'; };
    var first = views[roles[0]];
    if (first.items && first.counts && roles.every(function (r) { return views[r].values; })) {
      var table = el('table', 'private-table'), head = el('tr');
      ['item', 'count'].concat(roles.map(function (r) { return 'value to ' + who(r); }))
        .forEach(function (h) { head.appendChild(el('th', null, h)); });
      table.appendChild(head);
      first.items.forEach(function (item, i) {
        var tr = el('tr');
        [item, first.counts[i]].concat(roles.map(function (r) { return views[r].values[i]; }))
          .forEach(function (v) { tr.appendChild(el('td', null, String(v))); });
        table.appendChild(tr);
      });
      box.appendChild(el('div', 'small', 'private information (each side saw only its own values)'));
      box.appendChild(table);
      return box;
    }
    roles.forEach(function (r) {
      var part = el('details', 'private-role');
      part.appendChild(el('summary', null, 'what ' + who(r) + ' knew'));
      var dl = el('dl');
      Object.keys(views[r]).forEach(function (k) {
        var v = views[r][k];
        var value = v !== null && typeof v === 'object' ? JSON.stringify(v, null, 1) : String(v);
        dl.appendChild(el('dt', null, k));
        dl.appendChild(el('dd', null, value));
      });
      part.appendChild(dl);
      box.appendChild(part);
    });
    return box;
  }

  function openEpisode(key, updateHash) {
    var e = byKey[key];
    if (!e) return Promise.resolve();
    selected = key;
    list.querySelectorAll('tr.sel').forEach(function (r) { r.classList.remove('sel'); });
    var row = list.querySelector('tr[data-key="' + key + '"]');
    if (row) row.classList.add('sel');
    if (updateHash && window.history && history.replaceState) history.replaceState(null, '', '#episode=' + key);
    return loadTurns().then(function () { if (selected === key) showEpisode(e); });
  }

  function showEpisode(e) {
    viewer.textContent = '';
    var policy = data.policies[e.p], counterpart = data.counterparts[e.c];
    viewer.appendChild(el('h3', null, policy + ' (role ' + e.r + ') vs ' + counterpart));
    viewer.appendChild(el('div', 'small', 'scenario ' + e.s + ' \u00b7 seed ' + e.sd + ' \u00b7 ' + e.n +
      ' moves' + (e.first ? ' \u00b7 ' + e.first + ' opens' : '') + ' \u00b7 episode ' + e.k));
    viewer.appendChild(privateViews(e, policy, counterpart));
    var turns = el('div', 'turns');
    e.t.forEach(function (t) {
      var mine = t[0] === e.r;
      var box = el('div', 'turn ' + (mine ? 'policy' : 'counterpart') + (t[3] ? '' : ' private'));
      box.appendChild(el('div', 'who', (mine ? policy : counterpart) + ' \u00b7 ' + t[0] + ' \u00b7 ' + t[1] +
        (t[3] ? '' : ' \u00b7 private, not shown to the other side')));
      box.appendChild(document.createTextNode(t[2]));
      if (t[4]) box.appendChild(el('div', 'violation', 'violation: ' + t[4]));
      if (t[5]) box.appendChild(el('div', 'parsed', 'parsed: ' + t[5]));
      turns.appendChild(box);
    });
    if (!e.t.length) turns.appendChild(el('div', 'small', 'no transcript (the episode failed before any move)'));
    viewer.appendChild(turns);
    var out = el('div', 'outcome');
    var status = el('span', 'status-' + e.st, e.st);
    out.appendChild(el('b', null, 'outcome: '));
    out.appendChild(status);
    out.appendChild(document.createTextNode(' \u00b7 ' + (e.win ? 'success' : 'no success') + ' \u00b7 agreement: ' +
      (e.ag ? 'yes' : 'no') + ' \u00b7 policy score ' + fmt(e.ps) + ', counterpart score ' + fmt(e.cs)));
    var extras = Object.keys(e.m || {}).map(function (k) { return k + ': ' + e.m[k]; });
    if (extras.length) out.appendChild(el('div', 'small', extras.join(' \u00b7 ')));
    if (e.d) out.appendChild(el('div', 'small', 'detail: ' + e.d));
    if (e.err && e.err.length) out.appendChild(el('div', 'small', 'infrastructure errors: ' + e.err.join(' | ')));
    viewer.appendChild(out);
  }

  function setCell(p, c, r) {
    f.policy.value = String(p); f.counterpart.value = String(c); f.role.value = r;
    f.status.value = ''; f.outcome.value = ''; f.scenario.value = '';
    refilter();
  }
  /* A heatmap cell opens its episodes in the browser. */
  document.querySelectorAll('td[data-p]').forEach(function (td) {
    td.addEventListener('click', function () {
      setCell(td.getAttribute('data-p'), td.getAttribute('data-c'), td.getAttribute('data-r'));
      if (matches.length) openEpisode(matches[0].k, true);
      document.getElementById('transcripts').scrollIntoView();
    });
  });

  /* Deep links: #episode=KEY opens an episode; #cell=P,C,ROLE filters to a cell (indices). */
  function fromHash() {
    var h = decodeURIComponent(location.hash.replace(/^#/, ''));
    var m = /^episode=(.+)$/.exec(h);
    if (m && byKey[m[1]]) {
      var e = byKey[m[1]];
      setCell(e.p, e.c, e.r);
      return openEpisode(e.k, false);
    }
    m = /^cell=(\d+),(\d+),(.+)$/.exec(h);
    if (m) { setCell(m[1], m[2], m[3]); if (matches.length) return openEpisode(matches[0].k, false); }
    return Promise.resolve();
  }
  render();
  window.addEventListener('hashchange', fromHash);
  // Ready once an episode named in the address is on screen.
  fromHash().then(function () { document.documentElement.setAttribute('data-report-ready', '1'); });
})();
