/*
 * Apache Kafka's command-line tools, one after another in one JVM, for tests/apache_kafka.py's run_tool.
 * Compiled at test time against the pinned jars, as KcliClients is.
 *
 * A tool's own JVM costs ~0.45 CPU-s and ~0.35 s before it does anything (start-up, class loading);
 * a test run starts over a hundred of them. Here each request runs the tool's main as kafka-run-class.sh
 * would, with what a process of its own would give it: its arguments, its standard input, its standard
 * output and error captured, and its exit status through Kafka's Exit procedures (Exit.exit and
 * Exit.halt end the tool where they are called: what its finally blocks print after that is dropped, as
 * they would not run after System.exit). The shutdown hooks a tool adds through Exit run when it ends,
 * as at a JVM's exit. An exception out of main is printed as the JVM prints it, status 1.
 *
 * Requests, one JSON object a line on standard input: {"main": CLASS, "args": [...], "stdin": TEXT}.
 * Answers, one a line on standard output: {"status": N, "stdout": TEXT, "stderr": TEXT}.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.utils.Exit;

public final class ToolHost {

    /** Where System.out or System.err writes during one tool run; nothing once the tool has exited. */
    static final class Sink extends OutputStream {
        volatile ByteArrayOutputStream target = new ByteArrayOutputStream();
        volatile boolean muted;

        @Override
        public void write(int b) {
            if (!muted) target.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            if (!muted) target.write(b, off, len);
        }

        String take() {
            String text = target.toString(StandardCharsets.UTF_8);
            target = new ByteArrayOutputStream();
            muted = false;
            return text;
        }
    }

    /** System.in of one tool run. */
    static final class Source extends InputStream {
        volatile InputStream source = InputStream.nullInputStream();

        @Override
        public int read() throws java.io.IOException {
            return source.read();
        }

        @Override
        public int read(byte[] b, int off, int len) throws java.io.IOException {
            return source.read(b, off, len);
        }

        @Override
        public int available() throws java.io.IOException {
            return source.available();
        }
    }

    /** Thrown where a tool calls Exit.exit or Exit.halt: an Error, so its `catch (Exception e)` lets it by. */
    static final class ToolExit extends Error {
        final int status;

        ToolExit(int status) {
            super(null, null, false, false);
            this.status = status;
        }
    }

    static final Sink OUT = new Sink();
    static final Sink ERR = new Sink();
    static final Source IN = new Source();
    static final List<Runnable> HOOKS = new ArrayList<>();
    static volatile Integer exitStatus;

    public static void main(String[] argv) throws Exception {
        PrintStream answers = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        BufferedReader requests = new BufferedReader(
            new InputStreamReader(new FileInputStream(FileDescriptor.in), StandardCharsets.UTF_8));
        System.setOut(new PrintStream(OUT, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(ERR, true, StandardCharsets.UTF_8));
        System.setIn(IN);
        Exit.setExitProcedure((status, message) -> exit(status));
        Exit.setHaltProcedure((status, message) -> exit(status));
        Exit.setShutdownHookAdder((name, hook) -> HOOKS.add(hook));
        ObjectMapper json = new ObjectMapper();
        for (String line; (line = requests.readLine()) != null; ) {
            JsonNode request = json.readTree(line);
            List<String> args = new ArrayList<>();
            request.get("args").forEach(arg -> args.add(arg.asText()));
            JsonNode stdin = request.get("stdin");
            IN.source = stdin == null || stdin.isNull()
                ? InputStream.nullInputStream()
                : new ByteArrayInputStream(stdin.asText().getBytes(StandardCharsets.UTF_8));
            int status = run(request.get("main").asText(), args.toArray(new String[0]));
            System.out.flush();
            System.err.flush();
            Map<String, Object> answer = new LinkedHashMap<>();
            answer.put("status", status);
            answer.put("stdout", OUT.take());
            answer.put("stderr", ERR.take());
            answers.println(json.writeValueAsString(answer));
        }
    }

    static void exit(int status) {
        if (exitStatus == null) {
            exitStatus = status;
            OUT.muted = true;  // what the tool's finally blocks would print after System.exit
            ERR.muted = true;
        }
        throw new ToolExit(status);
    }

    static int run(String mainClass, String[] args) {
        exitStatus = null;
        HOOKS.clear();
        int status = 0;
        try {
            Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (!(cause instanceof ToolExit) && exitStatus == null) {
                System.err.print("Exception in thread \"main\" ");
                cause.printStackTrace();
                status = 1;
            }
        } catch (ReflectiveOperationException e) {
            System.err.println("Error: Could not find or load main class " + mainClass);
            status = 1;
        }
        if (exitStatus != null) {
            status = exitStatus;
        }
        OUT.muted = false;  // the hooks run at exit, and what they print is printed
        ERR.muted = false;
        for (Runnable hook : new ArrayList<>(HOOKS)) {
            try {
                hook.run();
            } catch (Throwable ignored) {
                // a hook's failure at exit is not the tool's status
            }
        }
        return status;
    }
}
