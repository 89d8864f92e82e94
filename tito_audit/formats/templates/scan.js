(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#templates tbody tr'));
  var buttons = Array.prototype.slice.call(document.querySelectorAll('button.count'));
  var search = document.getElementById('search'), kind = document.getElementById('kind');
  var shown = document.getElementById('shown'), picked = {};
  function apply() {
    var q = search.value.trim().toLowerCase(), k = kind.value, any = Object.keys(picked).length > 0, n = 0;
    rows.forEach(function (r) {
      var ok = (!any || picked[r.dataset.cls]) && (k === 'all' || r.dataset.kind === k)
        && (!q || r.dataset.search.indexOf(q) >= 0);
      r.hidden = !ok; if (ok) n += 1;
    });
    shown.textContent = n;
  }
  buttons.forEach(function (b) {
    b.addEventListener('click', function () {
      var c = b.dataset.countClass;
      if (picked[c]) { delete picked[c]; } else { picked[c] = true; }
      b.setAttribute('aria-pressed', picked[c] ? 'true' : 'false');
      apply();
    });
  });
  search.addEventListener('input', apply); kind.addEventListener('change', apply);
  // A filtered view is a link: ?cls=unsafe,safe&kind=approximate&q=qwen
  var params = new URLSearchParams(window.location.search);
  (params.get('cls') || '').split(',').forEach(function (c) {
    buttons.forEach(function (b) {
      if (c && b.dataset.countClass === c) { picked[c] = true; b.setAttribute('aria-pressed', 'true'); }
    });
  });
  if (params.get('kind')) { kind.value = params.get('kind'); }
  if (params.get('q')) { search.value = params.get('q'); }
  document.getElementById('controls').hidden = false;
  apply();
})();
