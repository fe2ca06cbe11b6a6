package io.idempotency.benchmarks.instrument;

import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;

import javax.sql.DataSource;

/** Wires the instruments into the application under test; see {@link InstrumentedDataSource} and {@link WireTraffic}. */
@Configuration(proxyBeanMethods = false)
public class InstrumentationConfiguration {

    @Bean
    FilterRegistrationBean<RequestRecordingFilter> requestRecordingFilter(BenchStats stats) {
        FilterRegistrationBean<RequestRecordingFilter> registration =
                new FilterRegistrationBean<>(new RequestRecordingFilter(stats));
        registration.setOrder(Ordered.HIGHEST_PRECEDENCE); // outside everything, the idempotency filter included
        return registration;
    }

    @Bean
    static BeanPostProcessor instrumentedDataSource(ObjectProvider<BenchStats> stats) {
        return new BeanPostProcessor() {
            @Override
            public Object postProcessAfterInitialization(Object bean, String beanName) {
                if (bean instanceof DataSource dataSource && !(bean instanceof InstrumentedDataSource)) {
                    return new InstrumentedDataSource(dataSource, stats.getObject());
                }
                return bean;
            }
        };
    }
}
