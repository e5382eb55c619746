package local.analysis.cjk;

import java.util.Map;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.cjk.CJKAnalyzer;
import org.elasticsearch.index.analysis.AbstractIndexAnalyzerProvider;
import org.elasticsearch.index.analysis.AnalyzerProvider;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The `cjk` analyzer for the local node. Elasticsearch's minimal distribution leaves out the
 * analysis-common module, which is where every full distribution registers `cjk`; this plugin
 * registers it the same way, with the same Lucene class (CJKAnalyzer, default stop words), so the
 * goods mapping and the tests are those of production.
 */
public final class CjkAnalysisPlugin extends Plugin implements AnalysisPlugin {
    @Override
    public Map<String, AnalysisProvider<AnalyzerProvider<? extends Analyzer>>> getAnalyzers() {
        return Map.of("cjk", (indexSettings, environment, name, settings) -> new AbstractIndexAnalyzerProvider<CJKAnalyzer>(name, settings) {
            private final CJKAnalyzer analyzer = new CJKAnalyzer();

            @Override
            public CJKAnalyzer get() {
                return analyzer;
            }
        });
    }
}
