"""The playground page driven in a real headless Chromium against a gateway and emulated workers.

Needs Debian's ``chromium`` and ``chromium-driver``: installed when missing (as root with
apt-get), skipped with the reason only where that is impossible. Headless Chromium has no sound card: the
page reports "played" once its Web Audio buffers are scheduled, which it does the same way
with or without a device.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.demo import build_parser, demo_config
from tests.support.audio import reference_wav
from tests.support.chromium import chromium_paths
from tests.support.stack import ADMIN_TOKEN, Stack, running_stack

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (test extra)")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

TEXT = "Hello from the playground. The gateway picks a pool for every request."
README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "playground.png"
WAIT_S = 60


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # The demo's routing settings (Compare may pin each side to its pool) and default thresholds:
    # on this idle fleet routing by class alone would send both sides to low-latency.
    extra = {"server": {"playground": True}, "routing": demo_config(build_parser().parse_args([]))["routing"]}
    with running_stack(tmp_path_factory.mktemp("playground"), time_scale=0.05, extra=extra) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, chromedriver = chromium_paths()
    options = Options()
    options.binary_location = chromium
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1050",
        "--autoplay-policy=no-user-gesture-required", "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream", "--mute-audio",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: WebDriver) -> list[str]:
    """Severe console entries, less Chromium's network note for a 503 from ``/ready``: the
    page polls it for its readiness note, and on a busy machine a pool can lose its only
    worker to a slow health probe for a moment, which is what the note is for."""
    entries = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    return [message for message in entries if "/ready - Failed to load resource" not in message]


def played_cards(driver: WebDriver, count: int) -> list[dict[str, str]]:
    """Waits until ``count`` result cards report played audio; returns their data."""

    def cards(d: WebDriver) -> list[dict[str, str]] | None:
        error = d.find_element(By.ID, "error")
        if error.is_displayed():
            raise AssertionError(f"page shows an error: {error.text}")
        found = d.execute_script(
            "return [...document.querySelectorAll('.result')].map(c => ({...c.dataset, "
            "title: c.querySelector('h4').textContent, state: c.querySelector('[data-field=state]').textContent, "
            "predicted: c.querySelector('[data-field=predicted]').textContent}))"
        )
        done = [card for card in found if card.get("played") == "true"]
        return done if len(found) == count and len(done) == count else None

    return WebDriverWait(driver, WAIT_S).until(cards)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def fleet_panel(driver: WebDriver) -> dict[str, str]:
    return {part: driver.find_element(By.ID, part).text for part in ("fleet", "decisions", "fleet-status")}


def open_page(driver: WebDriver, stack: Stack, fragment: str = "") -> None:
    driver.get(f"{stack.url}/playground{fragment}")
    WebDriverWait(driver, WAIT_S).until(lambda d: len(Select(d.find_element(By.ID, "voice")).options) > 0)
    text = driver.find_element(By.ID, "text")
    text.clear()
    text.send_keys(TEXT)


def test_speak_compare_clone_and_fleet(stack: Stack, browser: WebDriver, tmp_path: Path) -> None:
    # As the demo prints it: the link hands the fleet panel its admin token.
    open_page(browser, stack, f"#admin={ADMIN_TOKEN}")
    assert "admin" not in browser.current_url  # dropped from the address bar once read

    browser.find_element(By.ID, "speak").click()
    (card,) = played_cards(browser, 1)
    # Streamed pcm is scheduled chunk by chunk; each source leaves the stop list when it ends.
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return playing.size") == 0)
    assert browser.find_element(By.ID, "readiness").is_displayed() is False  # both pools serve
    assert card["pool"] in ("low_latency", "high_throughput")
    assert float(card["ttfpMs"]) > 0 and float(card["audioSeconds"]) > 1.0
    assert card["state"].startswith("played") and card["pool"] in card["state"]
    assert re.fullmatch(r"TTFP \d+ ms, RTF \d+\.\d{3}", card["predicted"])  # the adaptive policy's forecast

    clip = tmp_path / "reference.wav"
    clip.write_bytes(reference_wav(2.5))
    browser.find_element(By.ID, "clone-name").send_keys("playground-voice")
    browser.find_element(By.ID, "clone-file").send_keys(str(clip))
    browser.find_element(By.ID, "clone-text").send_keys("A short reference clip.")
    browser.find_element(By.ID, "clone-consent").click()
    browser.find_element(By.ID, "clone").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: "registered" in d.find_element(By.ID, "clone-status").text)
    assert Select(browser.find_element(By.ID, "voice")).first_selected_option.get_attribute("value") == "playground-voice"
    browser.find_element(By.ID, "speak").click()
    (cloned,) = played_cards(browser, 1)
    assert float(cloned["audioSeconds"]) > 1.0
    listing = httpx.get(f"{stack.url}/v1/audio/voices", timeout=10).json()
    assert "playground-voice" in {v["id"] for v in listing["voices"]}

    browser.find_element(By.ID, "compare").click()  # with the cloned voice still selected
    cards = {c["title"]: c for c in played_cards(browser, 2)}
    assert cards["low-latency"]["pool"] == "low_latency"
    assert cards["high-throughput"]["pool"] == "high_throughput"
    assert {c["reason"] for c in cards.values()} == {"pinned_pool"}
    assert all(float(c["ttfpMs"]) > 0 for c in cards.values())

    try:
        WebDriverWait(browser, WAIT_S).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#fleet tr[data-worker]")) == 2)
        WebDriverWait(browser, WAIT_S).until(
            lambda d: all(pool in d.find_element(By.ID, "decisions").text for pool in ("low_latency", "high_throughput"))
        )
    except TimeoutException:
        raise AssertionError(f"fleet view incomplete: {fleet_panel(browser)}") from None
    fleet = browser.find_element(By.ID, "fleet").text
    assert "ready" in fleet and "low_latency" in fleet and "high_throughput" in fleet
    # Static workers never change profile: the panel says the feature is off.
    assert "off" in browser.find_element(By.ID, "profile-changes").text

    assert console_errors(browser) == []
    # The README's picture (PLAYGROUND_SCREENSHOT=docs/playground.png runs this test to retake
    # it): the whole page, so the fleet view it names is in it, not cut off below the fold.
    window = browser.get_window_size()
    chrome_px = window["height"] - browser.execute_script("return window.innerHeight")
    page_px = browser.execute_script("return document.documentElement.scrollHeight")
    screenshot = tmp_path / "playground.png"
    try:
        browser.set_window_size(window["width"], page_px + chrome_px)
        assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
    finally:
        browser.set_window_size(window["width"], window["height"])
    if target := os.environ.get("PLAYGROUND_SCREENSHOT"):
        shutil.copy(screenshot, target)
    # The committed picture is this test's: same width, and the same page height within a few
    # rows of the fleet tables (a layout change, or a picture taken by hand, shows here).
    (width, height), (taken_width, taken_height) = png_size(README_SCREENSHOT), png_size(screenshot)
    retake = "PLAYGROUND_SCREENSHOT=docs/playground.png pytest tests/integration/test_playground_browser.py -k compare"
    assert width == taken_width and abs(height - taken_height) <= 0.05 * taken_height, (
        f"docs/playground.png is {width}x{height}, this test takes {taken_width}x{taken_height}; retake it: {retake}"
    )


def test_a_pool_that_cannot_serve_yet_is_explained_on_the_page(browser: WebDriver, tmp_path: Path) -> None:
    """As while the demo's high-throughput worker still warms: Compare's high-throughput side
    is routed by its class to low-latency, and the page says why instead of leaving it to the
    route reason."""
    extra = {"server": {"playground": True}, "routing": {"allow_pool_pin": True}}
    with running_stack(tmp_path, ll_workers=1, ht_workers=0, extra=extra) as only_ll:
        open_page(browser, only_ll)
        notice = WebDriverWait(browser, WAIT_S).until(
            lambda d: d.find_element(By.ID, "readiness") if d.find_element(By.ID, "readiness").is_displayed() else None
        )
        assert "high-throughput pool has no routable worker yet" in notice.text
        browser.find_element(By.ID, "compare").click()
        cards = {c["title"]: c for c in played_cards(browser, 2)}
        assert cards["high-throughput"]["pool"] == "low_latency" and cards["high-throughput"]["reason"] == "no_ht_workers"
        shown = browser.find_element(By.CSS_SELECTOR, '.result[data-reason="no_ht_workers"] [data-field="reason"]').text
        assert "no high-throughput worker is routable yet" in shown
        assert console_errors(browser) == []


def test_errors_show_the_openai_message(stack: Stack, browser: WebDriver) -> None:
    open_page(browser, stack)
    browser.find_element(By.ID, "text").clear()
    browser.find_element(By.ID, "text").send_keys("   ")
    browser.find_element(By.ID, "speak").click()
    error = WebDriverWait(browser, WAIT_S).until(
        lambda d: d.find_element(By.ID, "error") if d.find_element(By.ID, "error").is_displayed() else None
    )
    expected = httpx.post(f"{stack.url}/v1/audio/speech", json={"model": "tts-1", "input": "   "}, timeout=10)
    assert expected.status_code == 400
    assert error.text == expected.json()["error"]["message"]
    # The only console entry is Chromium's note about the refused request itself.
    messages = console_errors(browser)
    assert all("400" in message for message in messages), messages


def test_the_playground_is_off_unless_configured(tmp_path: Path) -> None:
    with running_stack(tmp_path, ll_workers=1, ht_workers=0) as plain:
        response = httpx.get(f"{plain.url}/playground", timeout=10)
    assert response.status_code == 404


# --- conversation mode: a voice session fed like an LLM's stream -----------------------------
REPLY_SENTENCES = [
    "Sure, I can help with that.",
    "The gateway cuts my reply into sentences as the text arrives.",
    "Each one plays as soon as its audio is here.",
]
# Long enough that its text is still streaming (about 14 s at 30 tokens per second) when the
# first sentence plays: Interrupt always lands in the middle of the reply.
LONG_REPLY = " ".join(f"This is sentence number {n} of a long reply that the listener will cut short." for n in range(1, 22))


def conversation_rows(driver: WebDriver) -> list[dict[str, str]]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#sentences li')].map(li => ({...li.dataset, "
        "text: li.querySelector('[data-field=text]').textContent, meta: li.querySelector('[data-field=meta]').textContent}))"
    )


def conversation_card(driver: WebDriver) -> dict[str, str]:
    return driver.execute_script("return {...document.getElementById('conversation-card').dataset}")


def wait_conversation(driver: WebDriver, predicate: str, until: object) -> object:
    """Waits for ``until(driver)``; an error on the page or a failed session fails at once."""

    def check(d: WebDriver) -> object:
        error = d.find_element(By.ID, "error")
        if error.is_displayed():
            raise AssertionError(f"page shows an error: {error.text}")
        if conversation_card(d).get("state") == "failed":
            raise AssertionError(f"the session failed: {d.find_element(By.ID, 'conversation-status').text}")
        return until(d)  # type: ignore[operator]

    try:
        return WebDriverWait(driver, WAIT_S).until(check)
    except TimeoutException:
        raise AssertionError(f"{predicate}: card {conversation_card(driver)}, rows {conversation_rows(driver)}") from None


def start_conversation(driver: WebDriver, stack: Stack, text: str) -> None:
    open_page(driver, stack)
    box = driver.find_element(By.ID, "conversation-text")
    box.clear()
    driver.execute_script("arguments[0].value = arguments[1]", box, text)  # pasted, not typed key by key
    assert driver.find_element(By.ID, "token-rate").get_attribute("value") == "30"  # an LLM's pace by default
    driver.find_element(By.ID, "converse").click()


def test_a_conversation_plays_its_sentences_in_order_with_their_pools(stack: Stack, browser: WebDriver) -> None:
    start_conversation(browser, stack, " ".join(REPLY_SENTENCES))
    wait_conversation(browser, "the reply is played to its end", lambda d: conversation_card(d).get("state") == "done")

    rows = conversation_rows(browser)
    assert [row["index"] for row in rows] == ["0", "1", "2"]
    assert [row["text"].strip() for row in rows] == REPLY_SENTENCES
    assert all(row["state"] == "played" for row in rows)
    # Heard in order, each scheduled right after the one before (gapless, never overlapping).
    assert [row["heard"] for row in rows] == ["0", "1", "2"]
    starts, ends = [float(row["startsAt"]) for row in rows], [float(row["endsAt"]) for row in rows]
    assert all(later >= end - 1e-6 for later, end in zip(starts[1:], ends[:-1], strict=True))
    # Every sentence shows the pool that served it and why; the first goes where first audio is fastest.
    assert rows[0]["pool"] == "low_latency"
    assert all(row["pool"] in ("low_latency", "high_throughput") and row["reason"] not in ("", "–") for row in rows)
    assert all(row["pool"] in row["meta"] and row["reason"] in row["meta"] for row in rows)
    card = conversation_card(browser)
    assert browser.find_element(By.ID, "conversation-status").text == f"done: 3 sentences, {card['receivedBytes']} bytes"
    assert int(card["receivedBytes"]) > 0
    wait_conversation(browser, "the session is closed", lambda d: conversation_card(d).get("socket") == "closed")
    assert browser.find_element(By.ID, "interrupt").get_attribute("disabled") is not None
    assert console_errors(browser) == []


def test_interrupt_stops_the_reply_at_once_and_shows_the_cancelled_answer(stack: Stack, browser: WebDriver) -> None:
    start_conversation(browser, stack, LONG_REPLY)
    wait_conversation(
        browser, "a sentence plays", lambda d: any(row["state"] == "playing" for row in conversation_rows(d))
    )
    browser.find_element(By.ID, "interrupt").click()
    # Silence at once: the click handler stops every scheduled source before anything else runs.
    assert browser.execute_script("return playing.size") == 0
    wait_conversation(browser, "the cancel is answered", lambda d: conversation_card(d).get("state") == "interrupted")
    card = conversation_card(browser)
    status = browser.find_element(By.ID, "conversation-status").text
    assert status == f"input.cancelled: utterance 0, {card['cancelledBytes']} bytes sent"
    # The gateway counts every byte it sent of the utterance, and the page received exactly those.
    assert int(card["cancelledBytes"]) == int(card["receivedBytes"]) > 0

    wait_conversation(browser, "the session is closed", lambda d: conversation_card(d).get("socket") == "closed")
    assert conversation_card(browser)["receivedBytes"] == card["receivedBytes"]  # no audio after the answer
    rows = conversation_rows(browser)
    assert not any(row["state"] == "playing" for row in rows)
    assert any(row["state"] == "stopped" for row in rows)
    assert len(rows) < LONG_REPLY.count(".")  # the unsent text was never spoken
    assert browser.execute_script("return playing.size") == 0
    assert browser.find_element(By.ID, "converse").get_attribute("disabled") is None  # ready for the next turn
    assert console_errors(browser) == []


def test_a_conversation_with_api_keys_sends_the_key_as_a_subprotocol(browser: WebDriver, tmp_path: Path) -> None:
    """Browsers cannot set headers on a WebSocket: the key entered on the page goes as the
    ``bearer.<key>`` subprotocol, and the gateway accepts the session with it."""
    from gateway.security.auth import hash_key

    key = "playground-session-key"
    extra = {"server": {"playground": True}, "auth": {"keys": [{"name": "main", "sha256": hash_key(key)}]}}
    with running_stack(tmp_path, ll_workers=1, ht_workers=0, time_scale=0.05, extra=extra) as keyed:
        browser.get(f"{keyed.url}/playground")
        field = browser.find_element(By.ID, "api-key")
        field.send_keys(key)
        browser.find_element(By.ID, "conversation-text").click()  # leaving the field reloads the voices with the key
        WebDriverWait(browser, WAIT_S).until(lambda d: len(Select(d.find_element(By.ID, "voice")).options) > 0)
        browser.execute_script("showError('')")  # the first voices request went before the key was entered
        box = browser.find_element(By.ID, "conversation-text")
        browser.execute_script("arguments[0].value = arguments[1]", box, REPLY_SENTENCES[0])
        browser.find_element(By.ID, "converse").click()
        wait_conversation(browser, "the reply is played", lambda d: conversation_card(d).get("state") == "done")
        (row,) = conversation_rows(browser)
        assert row["pool"] == "low_latency" and row["state"] == "played"
        # The only console entry: the voices request the page sent before the key was typed.
        messages = console_errors(browser)
        assert all("/v1/audio/voices" in message and "401" in message for message in messages), messages
