document.addEventListener('click', function (event) {
  var button = event.target.closest ? event.target.closest('button.copy') : null;
  if (!button) return;
  var source = document.getElementById(button.getAttribute('data-copy'));
  if (!source) return;
  var text = source.textContent;
  function done(word) { button.textContent = word; setTimeout(function () { button.textContent = 'copy'; }, 1200); }
  function fallback() {
    try {
      var range = document.createRange(); range.selectNodeContents(source);
      var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      done(document.execCommand('copy') ? 'copied' : 'selected');
    } catch (e) { done('selected'); }
  }
  try {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done('copied'); }, fallback);
    } else { fallback(); }
  } catch (e) { fallback(); }
});
