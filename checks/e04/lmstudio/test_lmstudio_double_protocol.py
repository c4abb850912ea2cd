"""The double speaks the SDK's protocol: probe, authentication, RPC and channel records,
and it records the load requests a careless client would make."""

import pytest

pytestmark = pytest.mark.software

import json

import httpx
import lmstudio
from httpx_ws import WebSocketUpgradeError, connect_ws

from prereg.e04.lmstudio_double import DoubleError, LMStudioDouble, double_embedding
from support.e04_doubles import CONTEXT_LENGTH, DIMENSION, KEY, LLM_KEY, OTHER_KEY

WAIT_SECONDS = 30


def test_the_sdk_probe_finds_the_double(double):
    assert lmstudio.Client.is_valid_api_host(double.api_host)
    reply = httpx.get(f"http://{double.api_host}/lmstudio-greeting", timeout=WAIT_SECONDS)
    assert reply.json() == {"lmstudio": True}


def test_authentication_comes_first(double):
    with connect_ws(f"ws://{double.api_host}/embedding") as ws:
        ws.send_json({"type": "rpcCall", "endpoint": "listLoaded", "callId": 1})
        reply = ws.receive_json(timeout=WAIT_SECONDS)
    assert reply["success"] is False and "authVersion" in reply["error"]
    with connect_ws(f"ws://{double.api_host}/embedding") as ws:
        ws.send_json({"authVersion": 1, "clientIdentifier": "a", "clientPasskey": "b"})
        assert ws.receive_json(timeout=WAIT_SECONDS) == {"success": True}
        ws.send_json({"type": "rpcCall", "endpoint": "listLoaded", "callId": 7})
        assert ws.receive_json(timeout=WAIT_SECONDS) == {
            "type": "rpcResult",
            "callId": 7,
            "result": [],
        }
        ws.send_text("not json")
        warning = ws.receive_json(timeout=WAIT_SECONDS)
        assert warning == {"type": "communicationWarning", "warning": "the message is not JSON"}


def test_an_unknown_namespace_is_rejected(double):
    with pytest.raises(WebSocketUpgradeError), connect_ws(f"ws://{double.api_host}/nope"):
        pass


def test_load_requests_are_recorded_and_refused(double, client):
    # what a backend without the guard's discipline would do; the checks assert it never does
    with pytest.raises(lmstudio.LMStudioServerError, match="never loads models"):
        client.embedding.model(KEY)
    with pytest.raises(lmstudio.LMStudioServerError, match="never loads models"):
        client.llm.load_new_instance(LLM_KEY)
    recorded = [(c.namespace, c.kind, c.endpoint) for c in double.residency_calls()]
    assert recorded == [("embedding", "channel", "getOrLoad"), ("llm", "channel", "loadModel")]
    get_or_load, load = (call.parameter for call in double.residency_calls())
    assert get_or_load["identifier"] == KEY and load["modelKey"] == LLM_KEY
    assert double.loaded() == []


def test_an_unload_by_a_client_is_recorded(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    client.embedding.unload(KEY)
    assert double.loaded() == []
    assert [c.endpoint for c in double.residency_calls()] == ["unloadModel"]


def test_parameters_are_parsed_with_the_sdk_structs(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    with pytest.raises(lmstudio.LMStudioServerError, match="EmbeddingRpcEmbedStringParameter"):
        client.embedding.remote_call("embedString", None)
    with pytest.raises(lmstudio.LMStudioServerError, match="Unsupported endpoint"):
        client.embedding.remote_call("getLoadConfig", None)


def test_instances_are_served_as_the_sdk_models_them(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    double.load(LLM_KEY, kind="llm")
    info = client.embedding.list_loaded()[0].get_info()
    assert isinstance(info, lmstudio.EmbeddingModelInstanceInfo)
    assert (info.model_key, info.context_length, info.identifier) == (KEY, CONTEXT_LENGTH, KEY)
    llm_info = client.llm.list_loaded()[0].get_info()
    assert isinstance(llm_info, lmstudio.LlmInstanceInfo) and llm_info.model_key == LLM_KEY
    assert {m.model_key for m in client.list_downloaded_models()} == {KEY, LLM_KEY}
    second = double.load(KEY, context_length=CONTEXT_LENGTH)
    assert second.identifier == f"{KEY}:2" and second.instance_reference != info.instance_reference


def test_embedding_an_unloaded_identifier_fails(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    handle = client.embedding.list_loaded()[0]
    double.unload(KEY)
    with pytest.raises(lmstudio.LMStudioServerError, match="No model found"):
        handle.embed("func Run()")


def test_embeddings_are_deterministic_and_depend_on_the_model(tmp_path):
    vectors = []
    for _ in range(2):
        with LMStudioDouble(dimension=DIMENSION) as server:
            server.load(KEY)
            with lmstudio.Client(server.api_host) as sdk:
                vectors.append(sdk.embedding.list_loaded()[0].embed(["func Run() error", ""]))
    assert vectors[0] == vectors[1]
    assert vectors[0][0] == double_embedding(KEY, "func Run() error", DIMENSION)
    assert double_embedding(KEY, "x", DIMENSION) != double_embedding(OTHER_KEY, "x", DIMENSION)
    assert any(vectors[0][1])  # an empty text still has a nonzero vector


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: d.load(KEY, kind="image"), "kind='image'"),
        (lambda d: d.load(KEY, context_length=0), "context_length=0"),
        (lambda d: d.load(KEY, path="../escape.gguf"), "'..'"),
        (lambda d: d.unload("absent"), "'absent'"),
    ],
    ids=["kind", "context", "path", "unload"],
)
def test_bad_requests_to_the_double_are_refused(call, message):
    with pytest.raises(DoubleError, match=message):
        call(LMStudioDouble())


def test_received_calls_are_json_records(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    client.embedding.list_loaded()[0].embed("func Run()")
    records = [call.as_dict() for call in double.calls()]
    assert json.loads(json.dumps(records)) == records
    assert records[-1]["endpoint"] == "embedString"
    assert records[-1]["parameter"]["inputString"] == "func Run()"
