package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Bad keys and bodies, generated: hundreds of requests to {@code POST /orders} over raw sockets, with keys of every
 * shape a client or an attacker can put in the header (structured-field syntax, quotes and escapes, commas, bytes
 * outside ASCII, several headers, nothing) and bodies that are valid JSON written every which way or broken in every
 * way a JSON reader meets (truncated, trailing bytes, deep nesting, numbers of thousands of digits, invalid UTF-8, the
 * wrong media type) or that only the library refuses, after the handler's binding read it (duplicate member names,
 * nesting deeper than the fingerprint takes). Whatever arrives, the rules hold:
 * <ul>
 *   <li>never a server error: bad input gets a 4xx;</li>
 *   <li>a 2xx kept its business row exactly once, the same bytes sent again are its replay, byte for byte, and
 *       another body under its key is refused (422) and keeps nothing;</li>
 *   <li>a refusal kept nothing — no business row, no record of its key — and the same bytes sent again are refused
 *       the same way, anew (no claim was left behind to answer "in progress", no refusal stored to be replayed);</li>
 *   <li>a request that only the library refuses (its key is missing or malformed and its body is JSON the handler
 *       reads, or its key is good and its body is JSON only the library refuses) gets the library's problem: 400,
 *       {@code application/problem+json}, of the type that says why.</li>
 * </ul>
 * The generator's seed is random per run and named in every failure; {@code -Didempotency.fuzz.seed=…} replays a run.
 */
class RequestFuzzIntegrationTest extends OrdersApplicationTest {

    private static final int REQUESTS = 300;

    @Test
    void badKeysAndBodiesAreRefusedCleanlyAndGoodOnesRunOnceAndReplay() throws Exception {
        long seed = Long.getLong("idempotency.fuzz.seed", new Random().nextLong());
        Random random = new Random(seed);
        String run = UUID.randomUUID().toString().substring(0, 8);
        int kept = 0;
        int refused = 0;
        int expected = 0;
        java.util.Map<Integer, Integer> statuses = new java.util.TreeMap<>();
        for (int i = 0; i < REQUESTS; i++) {
            String note = "fuzz-" + run + "-" + i;
            // the key's text, wherever the generator puts it: one request's never holds another's ("…1k" is not in
            // "…15k")
            String unique = run + i + "k";
            Generated generated = request(random, unique, note);
            String request = generated.request();
            String what = "seed " + seed + ", request " + i + ":\n" + request;

            Answer first = Answer.of(raw(request));
            assertThat(first.status).as("no server error; " + what + "\nanswer:\n" + first.text).isLessThan(500);
            statuses.merge(first.status, 1, Integer::sum);
            if (generated.problem() != null) {
                expected++;
                assertThat(first.status).as("the library's refusal; " + what + "\nanswer:\n" + first.text)
                        .isEqualTo(400);
                assertThat(first.headers).as("the library's refusal; " + what + "\nanswer:\n" + first.text)
                        .containsIgnoringCase("Content-Type: application/problem+json");
                assertThat(first.body).as("the library's refusal; " + what + "\nanswer:\n" + first.text)
                        .contains("/" + generated.problem() + "\"");
            }
            Answer again = Answer.of(raw(request));
            if (first.status < 300) {
                kept++;
                assertThat(rows(note)).as("kept once; " + what).isEqualTo(1);
                assertThat(again.status).as("replayed; " + what).isEqualTo(first.status);
                assertThat(again.headers).as("replayed; " + what).containsIgnoringCase("Idempotent-Replayed: true");
                assertThat(again.body).as("the same answer; " + what).isEqualTo(first.body);
                Answer other = Answer.of(raw(withBody(request, body(request).replace(note, note + "-other"))));
                assertThat(other.status).as("another body under the key; " + what + "\nanswer:\n" + other.text)
                        .isEqualTo(422);
                assertThat(rows(note + "-other")).as("another body under the key; " + what).isZero();
            } else {
                refused++;
                assertThat(rows(note)).as("nothing kept; " + what + "\nanswer:\n" + first.text).isZero();
                assertThat(again.status).as("refused again the same way; " + what + "\nanswers:\n" + first.text
                        + "\n" + again.text).isEqualTo(first.status);
                // a refusal kept under the key would be replayed with the same status: refused anew, not replayed,
                // and no record of the key either
                assertThat(again.headers).as("refused anew, not replayed; " + what + "\nanswer:\n" + again.text)
                        .doesNotContainIgnoringCase("Idempotent-Replayed");
                // the key as stored holds the unique text, or its base64 (a byte-sequence-shaped bare key)
                assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where strpos(idempotency_key, '"
                        + unique + "') > 0 or strpos(idempotency_key, '" + base64(unique) + "') > 0"))
                        .as("no record kept; " + what).isZero();
            }
        }
        System.out.println("request fuzz, seed " + seed + ": first answers by status " + statuses + ", " + expected
                + " of them refusals only the library makes");
        // the generator must reach both sides, or the rules above prove nothing
        assertThat(kept).as("requests kept, seed " + seed).isGreaterThan(REQUESTS / 10);
        assertThat(refused).as("requests refused, seed " + seed).isGreaterThan(REQUESTS / 10);
        assertThat(expected).as("requests only the library refuses, seed " + seed).isGreaterThan(REQUESTS / 20);
    }

    /** A generated request, and the type of the library's problem it must get, or null where that is not known. */
    private record Generated(String request, String problem) {
    }

    /**
     * A generated key header; the problem it must get when nothing else is wrong with the request, or null; whether it
     * is known to be a usable key.
     */
    private record Keys(List<String> values, String problem, boolean valid) {
    }

    private static String base64(String text) {
        return java.util.Base64.getEncoder().encodeToString(text.getBytes(StandardCharsets.US_ASCII));
    }

    /** One whole HTTP/1.1 request, as ISO-8859-1 characters (one per byte). */
    private static Generated request(Random random, String unique, String note) {
        StringBuilder head = new StringBuilder("POST /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        int contentType = random.nextInt(20);
        if (contentType == 0) {
            head.append("Content-Type: text/plain\r\n");
        } else if (contentType == 1) {
            head.append("Content-Type: application/json;charset=UTF-8\r\n");
        } else if (contentType != 2) {
            head.append("Content-Type: application/json\r\n");
        }
        Keys keys = keys(random, unique);
        for (String key : keys.values()) {
            head.append("Idempotency-Key: ").append(key).append("\r\n");
        }
        int bodyCase = random.nextInt(20);
        byte[] body = body(random, bodyCase, note);
        head.append("Content-Length: ").append(body.length).append("\r\n\r\n");
        String problem = null;
        if (contentType == 1 || contentType > 2) {
            if (keys.problem() != null && bodyCase >= 12) {
                problem = keys.problem(); // a body the handler reads
            } else if (keys.problem() == null && keys.valid() && (bodyCase == 10 || bodyCase == 11)) {
                problem = "idempotency-body-invalid";
            }
        }
        return new Generated(head + new String(body, StandardCharsets.ISO_8859_1), problem);
    }

    private static String body(String request) {
        return request.substring(request.indexOf("\r\n\r\n") + 4);
    }

    /** {@code request} with another body, and its length. */
    private static String withBody(String request, String body) {
        String head = request.substring(0, request.indexOf("\r\n\r\n"));
        return head.replaceFirst("Content-Length: \\d+", "Content-Length: " + body.length()) + "\r\n\r\n" + body;
    }

    /** The header values to send: usually one, unique to the request unless it is malformed on purpose. */
    private static Keys keys(Random random, String unique) {
        String missing = "idempotency-key-missing";
        String malformed = "idempotency-key-malformed";
        return switch (random.nextInt(24)) {
            case 0 -> new Keys(List.of(), missing, false); // none
            case 1 -> new Keys(List.of(""), malformed, false);
            case 2 -> new Keys(List.of("\"" + unique + "\""), null, true);
            case 3 -> new Keys(List.of("\"" + unique + "\\\"q\\\\" + "\""), null, true); // escapes inside a quoted key
            case 4 -> new Keys(List.of(unique + ", other-" + unique), malformed, false); // a list
            case 5 -> new Keys(List.of("\"" + unique + "\";p=1"), null, true); // a parameter
            case 6 -> new Keys(List.of(":" + base64(unique) + ":"), null, true); // a byte sequence's syntax, a bare key
            case 7 -> new Keys(List.of(unique + "\u00e9\u00ff"), malformed, false); // obs-text bytes
            case 8 -> new Keys(List.of(unique + randomText(random, 250 + random.nextInt(60), 0x21, 0x7e)), malformed,
                    false); // longer than 255 characters (any comma or quote in it makes it malformed too)
            case 9 -> new Keys(List.of(unique, unique + "-second"), malformed, false);
            case 10 -> new Keys(List.of("\"" + unique + "\\"), malformed, false); // an unterminated quote
            case 11, 12, 13 -> // any visible ASCII: a space, a comma or a quote in it makes it malformed
                    new Keys(List.of(unique + randomText(random, random.nextInt(40), 0x20, 0x7e)), null, false);
            case 14, 15, 16, 17 -> { // any visible ASCII, quoted as a string
                String text = randomText(random, random.nextInt(40), 0x20, 0x7e);
                yield new Keys(List.of("\"" + unique + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\""),
                        null, true);
            }
            default -> new Keys(List.of(unique), null, true);
        };
    }

    /** A body of the kind {@code bodyCase} picks: 0–9 broken, 10–11 JSON only the library refuses, others valid. */
    private static byte[] body(Random random, int bodyCase, String note) {
        String valid = validJson(random, note);
        byte[] utf8 = valid.getBytes(StandardCharsets.UTF_8);
        return switch (bodyCase) {
            case 0 -> java.util.Arrays.copyOf(utf8, random.nextInt(utf8.length)); // truncated
            case 1 -> (valid + randomText(random, 1 + random.nextInt(5), 0x21, 0x7e)).getBytes(StandardCharsets.UTF_8);
            case 2 -> ("{\"note\":\"" + note + "\",\"deep\":" + "[".repeat(600 + random.nextInt(2000))
                    + "]".repeat(600)).getBytes(StandardCharsets.UTF_8); // unbalanced and too deep
            case 3 -> ("{\"note\":\"" + note + "\",\"n\":" + "9".repeat(900 + random.nextInt(300)) + "}")
                    .getBytes(StandardCharsets.UTF_8); // a number near the length limit, either side of it
            case 4 -> { // a byte that is no UTF-8 inside a string
                byte[] bad = ("{\"note\":\"" + note + "\",\"x\":\"a_b\"}").getBytes(StandardCharsets.UTF_8);
                bad[bad.length - 4] = (byte) (0x80 + random.nextInt(0x7f));
                yield bad;
            }
            case 5 -> new byte[0];
            case 6 -> "null".getBytes(StandardCharsets.UTF_8);
            case 7 -> ("[" + valid + "]").getBytes(StandardCharsets.UTF_8);
            case 8 -> ("{'note':'" + note + "'}").getBytes(StandardCharsets.UTF_8);
            case 9 -> ("{\"note\":\"" + note + "\",\"n\":NaN}").getBytes(StandardCharsets.UTF_8);
            // JSON the handler's binding reads, which only the library refuses, after the binding: duplicate member
            // names, nesting deeper than the fingerprint takes but not than the JSON reader does
            case 10 -> ("{\"note\":\"" + note + "\",\"x\":1,\"x\":2}").getBytes(StandardCharsets.UTF_8);
            case 11 -> {
                int depth = 129 + random.nextInt(300);
                yield ("{\"note\":\"" + note + "\",\"deep\":" + "[".repeat(depth) + "]".repeat(depth) + "}")
                        .getBytes(StandardCharsets.UTF_8);
            }
            default -> utf8;
        };
    }

    /** A JSON object with {@code note}, members in any order, any spacing, and values of every kind. */
    private static String validJson(Random random, String note) {
        List<String> members = new ArrayList<>();
        members.add("\"note\"" + space(random) + ":" + space(random) + "\"" + note + "\"");
        members.add("\"amount\":\"" + random.nextInt(100000) / 100.0 + "\"");
        int extra = random.nextInt(5);
        for (int i = 0; i < extra; i++) {
            members.add("\"x" + i + "\"" + space(random) + ":" + space(random) + value(random, 3));
        }
        java.util.Collections.shuffle(members, random);
        return "{" + space(random) + String.join("," + space(random), members) + space(random) + "}";
    }

    private static String value(Random random, int depth) {
        int kind = random.nextInt(depth > 0 ? 9 : 7);
        return switch (kind) {
            case 0 -> "true";
            case 1 -> "null";
            case 2 -> Long.toString(random.nextLong());
            case 3 -> random.nextInt(1000) + "." + random.nextInt(1000) + (random.nextBoolean() ? "e" + (random.nextInt(20) - 10) : "");
            case 4 -> "\"\\u00e9\\n\\\"\\\\\\/" + randomText(random, random.nextInt(10), 0x23, 0x5b) + "\"";
            case 5 -> "\"caf\u00e9 \u20ac \ud83d\ude00\"";
            case 6 -> "-0.0";
            case 7 -> "[" + value(random, depth - 1) + "," + space(random) + value(random, depth - 1) + "]";
            default -> "{\"a\":" + value(random, depth - 1) + ",\"b\":" + value(random, depth - 1) + "}";
        };
    }

    private static String space(Random random) {
        return switch (random.nextInt(6)) {
            case 0 -> " ";
            case 1 -> "\n\t ";
            default -> "";
        };
    }

    private static String randomText(Random random, int length, int from, int to) {
        StringBuilder text = new StringBuilder(length);
        for (int i = 0; i < length; i++) {
            text.append((char) (from + random.nextInt(to - from + 1)));
        }
        return text.toString();
    }

    /** An answer read from a socket: status, header section and body (de-chunked). */
    private record Answer(int status, String headers, String body, String text) {

        static Answer of(String text) throws IOException {
            int end = text.indexOf("\r\n\r\n");
            if (!text.startsWith("HTTP/1.1 ") || end < 0) {
                throw new IOException("not an HTTP answer: " + text);
            }
            String headers = text.substring(0, end);
            String body = text.substring(end + 4);
            if (headers.toLowerCase(java.util.Locale.ROOT).contains("transfer-encoding: chunked")) {
                StringBuilder joined = new StringBuilder();
                int at = 0;
                while (true) {
                    int lineEnd = body.indexOf("\r\n", at);
                    int size = Integer.parseInt(body.substring(at, lineEnd).trim(), 16);
                    if (size == 0) {
                        break;
                    }
                    joined.append(body, lineEnd + 2, lineEnd + 2 + size);
                    at = lineEnd + 2 + size + 2;
                }
                body = joined.toString();
            }
            return new Answer(Integer.parseInt(text.substring(9, 12)), headers, body, text);
        }
    }
}
