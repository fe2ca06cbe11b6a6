package io.idempotency.sample.payment;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.security.config.Customizer;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.core.userdetails.User;
import org.springframework.security.core.userdetails.UserDetailsService;
import org.springframework.security.provisioning.InMemoryUserDetailsManager;
import org.springframework.security.web.SecurityFilterChain;

/**
 * Optional HTTP Basic authentication for two demo users, {@code alice} / {@code alice-pass} and {@code bob} /
 * {@code bob-pass}, so that caller scoping can be seen from outside: the starter namespaces idempotency keys by the
 * authenticated principal, so alice and bob using the same key get separate payments and never each other's answer.
 * Anonymous calls stay allowed (their namespace is the empty one), and CSRF protection is off because this is a JSON
 * API for non-browser clients.
 */
@Configuration(proxyBeanMethods = false)
public class SecurityConfiguration {

    @Bean
    SecurityFilterChain api(HttpSecurity http) throws Exception {
        return http
                .csrf(csrf -> csrf.disable())
                .authorizeHttpRequests(requests -> requests.anyRequest().permitAll())
                .httpBasic(Customizer.withDefaults())
                .build();
    }

    @Bean
    UserDetailsService demoUsers() {
        return new InMemoryUserDetailsManager(
                User.withUsername("alice").password("{noop}alice-pass").roles("PAYER").build(),
                User.withUsername("bob").password("{noop}bob-pass").roles("PAYER").build());
    }
}
