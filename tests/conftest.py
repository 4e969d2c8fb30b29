import pytest


@pytest.fixture(autouse=True)
def _own_response_cache(tmp_path_factory, monkeypatch):
    """Each test gets an empty response cache (runner/cache.py follows XDG_CACHE_HOME): a reply
    cached by one test never stands in for a call another test counts, nor does the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
