// Spark's own REST submission client (the one behind spark-submit's REST path, --status and
// --kill) against a master: submits a Python app in Spark's REST form, waits for RUNNING,
// kills it, waits for KILLED. Prints one line per step; tests/test_spark_interop.py reads them.
// Run as a single-file program: java -cp '<pyspark jars>/*' RestProbe.java MASTER APP.py
import org.apache.spark.deploy.rest.CreateSubmissionResponse;
import org.apache.spark.deploy.rest.KillSubmissionResponse;
import org.apache.spark.deploy.rest.RestSubmissionClient;
import org.apache.spark.deploy.rest.SubmissionStatusResponse;
import scala.collection.immutable.Map;
import scala.collection.immutable.Map$;
import scala.jdk.javaapi.CollectionConverters;

public class RestProbe {
    public static void main(String[] args) throws Exception {
        String master = args[0], app = args[1];
        RestSubmissionClient client = new RestSubmissionClient(master);
        java.util.Map<String, String> conf = new java.util.HashMap<>();
        conf.put("spark.app.name", "spark-rest-client");
        conf.put("spark.master", master);
        conf.put("spark.submit.deployMode", "cluster");
        Map<String, String> props = Map$.MODULE$.from(CollectionConverters.asScala(conf));
        Map<String, String> env = Map$.MODULE$.<String, String>empty();
        CreateSubmissionResponse created = (CreateSubmissionResponse) client.createSubmission(
            client.constructSubmitRequest(app, "org.apache.spark.deploy.SparkSubmit",
                                          new String[] {app}, props, env));
        System.out.println("created " + created.success() + " " + created.submissionId());
        String id = created.submissionId();
        System.out.println("running " + waitFor(client, id, "RUNNING"));
        KillSubmissionResponse killed = (KillSubmissionResponse) client.killSubmission(id);
        System.out.println("kill " + killed.success());
        System.out.println("killed " + waitFor(client, id, "KILLED"));
    }

    static String waitFor(RestSubmissionClient client, String id, String state)
            throws Exception {
        String seen = "";
        for (int i = 0; i < 300 && !seen.equals(state); i++) {
            SubmissionStatusResponse s =
                (SubmissionStatusResponse) client.requestSubmissionStatus(id, true);
            seen = s.driverState();
            if (!seen.equals(state)) Thread.sleep(100);
        }
        return seen;
    }
}
