package txnbench.client;

import java.util.LinkedHashMap;
import java.util.Map;

/** Just enough JSON: flat objects in (rows, commands), flat-ish objects out (events). No extra jar. */
final class Json {
    private Json() {}

    /** Parses one JSON object whose values are strings, numbers, booleans, null or nested objects. */
    static Map<String, Object> parseObject(String text) {
        Parser p = new Parser(text);
        p.ws();
        Map<String, Object> m = p.object();
        p.ws();
        if (p.i != text.length()) throw p.err("trailing characters");
        return m;
    }

    private static final class Parser {
        final String s;
        int i;

        Parser(String s) { this.s = s; }

        IllegalArgumentException err(String what) {
            return new IllegalArgumentException("bad JSON at character " + i + ": " + what);
        }

        void ws() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }

        void expect(char c) {
            ws();
            if (i >= s.length() || s.charAt(i) != c) throw err("expected '" + c + "'");
            i++;
        }

        Map<String, Object> object() {
            expect('{');
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (i < s.length() && s.charAt(i) == '}') { i++; return m; }
            while (true) {
                ws();
                String k = string();
                expect(':');
                ws();
                m.put(k, value());
                ws();
                if (i < s.length() && s.charAt(i) == ',') { i++; continue; }
                expect('}');
                return m;
            }
        }

        Object value() {
            if (i >= s.length()) throw err("value expected");
            char c = s.charAt(i);
            if (c == '"') return string();
            if (c == '{') return object();
            if (s.startsWith("null", i)) { i += 4; return null; }
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            if (start == i) throw err("unsupported value");
            String num = s.substring(start, i);
            try {
                return (num.contains(".") || num.contains("e") || num.contains("E"))
                        ? (Object) Double.parseDouble(num) : (Object) Long.parseLong(num);
            } catch (NumberFormatException e) {
                throw err("bad number " + num);
            }
        }

        String string() {
            if (i >= s.length() || s.charAt(i) != '"') throw err("string expected");
            i++;
            StringBuilder b = new StringBuilder();
            while (true) {
                if (i >= s.length()) throw err("unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 't' -> b.append('\t');
                    case 'r' -> b.append('\r');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> { b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; }
                    default -> b.append(e);
                }
            }
        }
    }

    /** An output object built field by field, in order. */
    static final class Out {
        private final StringBuilder b = new StringBuilder(160).append('{');
        private boolean first = true;

        Out(String ev) { str("ev", ev); }

        private StringBuilder key(String k) {
            if (!first) b.append(',');
            first = false;
            quote(b, k);
            return b.append(':');
        }

        Out str(String k, String v) {
            key(k);
            if (v == null) b.append("null"); else quote(b, v);
            return this;
        }

        Out num(String k, long v) { key(k).append(v); return this; }

        Out num(String k, double v) { key(k).append(Double.isFinite(v) ? Double.toString(v) : "null"); return this; }

        Out bool(String k, boolean v) { key(k).append(v); return this; }

        /** A value that is already JSON text. */
        Out raw(String k, String json) { key(k).append(json); return this; }

        @Override
        public String toString() { return b.toString() + '}'; }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2);
        quote(b, s);
        return b.toString();
    }

    static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c)); else b.append(c);
                }
            }
        }
        b.append('"');
    }
}
