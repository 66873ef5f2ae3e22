"""The segment protocol against a Java peer: java.io.DataOutputStream/DataInputStream write and read the
Strings (writeUTF: modified UTF-8), UUIDs and big-endian integers, as Pravega's own Java code does.

There is no Pravega client to install here, so the peer is a small Java program (below) that speaks the
documented wire format with the JDK's own encoders; what it must agree with is Java's, not ours.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from logport.hub import Hub
from logport.store.reader import DirectoryReader
from tests.segment.test_server import hub_config

pytestmark = [pytest.mark.interop, pytest.mark.skipif(shutil.which("java") is None, reason="no java")]

JAVA_PEER = r"""
import java.io.*;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

public class SegmentPeer {
    static DataOutputStream out;
    static DataInputStream in;

    static void header(int type, int length) throws IOException { out.writeInt(type); out.writeInt(length); }
    static int utfLength(String s) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        new DataOutputStream(b).writeUTF(s);
        return b.size();
    }
    static void uuid(UUID u) throws IOException { out.writeLong(u.getMostSignificantBits()); out.writeLong(u.getLeastSignificantBits()); }
    static UUID readUuid() throws IOException { return new UUID(in.readLong(), in.readLong()); }
    static byte[] event(String body) throws IOException {
        byte[] data = body.getBytes(StandardCharsets.UTF_8);
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        DataOutputStream d = new DataOutputStream(b);
        d.writeInt(0); d.writeInt(data.length); d.write(data);
        return b.toByteArray();
    }
    static int lastLength;
    static int nextType() throws IOException {
        while (true) {
            int type = in.readInt();
            int length = in.readInt();
            lastLength = length;
            if (type != 2) return type;  // KeepAlive
            in.skipBytes(length);
        }
    }

    public static void main(String[] args) throws Exception {
        Socket socket = new Socket("127.0.0.1", Integer.parseInt(args[0]));
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
        UUID id = UUID.fromString("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
        String segment = "java-segment";

        header(5, 16 + utfLength(segment)); uuid(id); out.writeUTF(segment); out.flush();   // SetupAppend
        if (nextType() != 6) throw new IllegalStateException("expected AppendSetup");
        String setupSegment = in.readUTF(); UUID setupId = readUuid(); long ack = in.readLong();
        System.out.println("AppendSetup " + setupSegment + " " + setupId + " " + ack);

        byte[] e1 = event("h\u00e9llo \u0000 \uD83D\uDE00");
        byte[] e2 = event("second");
        int k = 5;  // e2 is split across the end of the block: PartialMessage Begin inside, End after
        header(7, 16 + 8 + 4); uuid(id); out.writeLong(ack); out.writeInt(e1.length + 8 + 1 + k);
        out.write(e1);
        header(1, 1 + k); out.writeByte(0); out.write(e2, 0, k);
        int blockLength = e1.length + e2.length;
        header(8, 16 + 8 + 4); uuid(id); out.writeLong(ack + blockLength); out.writeInt(blockLength);
        header(1, 1 + e2.length - k); out.writeByte(2); out.write(e2, k, e2.length - k);
        out.flush();
        if (nextType() != 9) throw new IllegalStateException("expected DataAppended");
        System.out.println("DataAppended " + readUuid() + " " + in.readLong());

        header(3, utfLength(segment) + 8 + 4 + 4); out.writeUTF(segment); out.writeLong(0); out.writeInt(1 << 20); out.writeInt(0);
        out.flush();
        if (nextType() != 4) throw new IllegalStateException("expected SegmentRead");
        socket.setSoTimeout(5000);
        String readSegment = in.readUTF(); long offset = in.readLong(); int flags = in.readUnsignedByte();
        byte[] data = new byte[lastLength - utfLength(readSegment) - 9];
        in.readFully(data);
        DataInputStream frames = new DataInputStream(new ByteArrayInputStream(data));
        StringBuilder bodies = new StringBuilder();
        while (frames.available() > 0) {
            int frameType = frames.readInt(); byte[] body = new byte[frames.readInt()]; frames.readFully(body);
            if (frameType == 0) bodies.append("|").append(new String(body, StandardCharsets.UTF_8));
        }
        System.out.println("SegmentRead " + readSegment + " " + offset + " " + flags + " " + data.length);
        System.out.println("Events" + bodies.toString().replace("\u0000", "NUL"));

        String bad = "bad name \u00e9 \u0000 \uD83D\uDE00";
        header(5, 16 + utfLength(bad)); uuid(UUID.randomUUID()); out.writeUTF(bad); out.flush();
        int type = nextType();
        String echoed = in.readUTF();
        System.out.println("Reply " + type + " " + echoed.equals(bad));
        socket.close();
    }
}
"""


@pytest.mark.timeout(120)
async def test_java_peer_appends_with_a_split_event_and_reads(tmp_path: Path) -> None:
    source = tmp_path / "SegmentPeer.java"
    source.write_text(JAVA_PEER)
    config = hub_config(tmp_path)
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    try:
        import asyncio

        proc = await asyncio.create_subprocess_exec(
            "java", str(source), str(config.segment.port),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 100)
        assert proc.returncode == 0, err.decode()
    finally:
        await hub.stop()
    lines = out.decode().splitlines()
    e1 = "h\u00e9llo \u0000 \U0001f600".encode()
    block = (8 + len(e1)) + (8 + len(b"second"))
    assert lines[0] == "AppendSetup java-segment 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 0"
    assert lines[1] == f"DataAppended 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 {block}"
    events = [bytes(b) for _, b in DirectoryReader(config.store.data_dir).iter_events("java-segment")]
    assert events == [e1, b"second"]
    end = DirectoryReader(config.store.data_dir).bounds("java-segment")[1]
    assert lines[2] == f"SegmentRead java-segment 0 1 {end}"  # at tail, the whole segment
    assert lines[3] == "Events|h\u00e9llo NUL \U0001f600|second"
    assert lines[4] == "Reply 55 true"  # InvalidSegmentName, the name as Java's readUTF decodes it
